"""Engine and workload profiles: small TOML files that parametrize the sim.

An *engine profile* describes one inference server on one GPU (how long a prefill of n tokens
and a decode step of a batch take, how much KV fits, how long a weight reload takes). A
*workload profile* describes the rollouts of one RL run (prompt length, turns per rollout,
tokens per turn, tool time, batch shape, train time). Both are plain dataclasses so that code
and tests can also build them directly; `load_engine_profile` / `load_workload_profile` read
TOML and fail on unknown keys, naming the dotted key, like the run config does.
"""

from __future__ import annotations

import dataclasses
import math
import random
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from tandem.paths import PROJECT_ROOT


def resolve_profile_path(path: str) -> Path:
    """A relative profile path means the current directory, falling back to the repository."""
    p = Path(path).expanduser()
    if p.is_absolute() or p.exists():
        return p
    return PROJECT_ROOT / p if (PROJECT_ROOT / p).exists() else p


class ProfileError(ValueError):
    """A profile problem; the message names the file and the dotted key."""


# --------------------------------------------------------------------------- engine profile
@dataclass
class DecodeParams:
    base_ms: float = 13.0
    """Time of one decode step at batch 1 with an empty KV cache: reading all weights once."""
    per_seq_ms: float = 0.05
    """Added per running request per step: its share of the GEMM compute (2 * params FLOPs)."""
    per_kv_token_us: float = 0.061
    """Added per KV token held by the running batch per step: attention reads the whole cache."""


@dataclass
class PrefillParams:
    base_ms: float = 4.0
    """Fixed cost of one prefill forward (one chunk): launch + weight read."""
    per_token_us: float = 90.0
    """Linear (GEMM) cost per new prompt token."""
    attn_us_per_token_per_1k_ctx: float = 2.0
    """Attention cost per new token per 1000 tokens of context before it (quadratic term)."""
    chunk_tokens: int = 8192
    """Chunked-prefill size: most new tokens per prefill forward (SGLang --chunked-prefill-size)."""


@dataclass
class CapacityParams:
    max_total_tokens: int = 245_000
    """KV-cache capacity in tokens (prompt + generated, across running requests and the prefix cache)."""
    max_running_requests: int = 3000
    """Most requests in the decode batch (SGLang --max-running-requests)."""
    context_length: int = 40960
    """Longest prompt + output the model accepts."""
    clip_max_new_tokens: int = 4096
    """Admission reserves at most this many future tokens per request (SGLang CLIP_MAX_NEW_TOKENS)."""
    init_new_token_ratio: float = 0.7
    """Fraction of a running request's remaining max_new_tokens reserved at admission, right after start or a retraction."""
    min_new_token_ratio: float = 0.098
    """Floor the reserve fraction decays to (SGLang: 0.7 * 0.14)."""
    new_token_ratio_decay_steps: int = 600
    """Decode steps over which the reserve fraction decays from init to min."""


@dataclass
class PrefixCacheParams:
    enabled: bool = True
    """Model a radix (prefix) cache: the cached prefix of a prompt is not prefilled again."""
    block_tokens: int = 64
    """Granularity of prefix matching (SGLang matches per token; blocks keep the sim cheap)."""


@dataclass
class WeightParams:
    reload_s: float = 7.0
    """Modelled GPU time of /update_weights_from_disk for the real model (scaled by time_scale); real file I/O of the published version is added on top."""


@dataclass
class StartupParams:
    server_s: float = 60.0
    """Modelled seconds from launching a new engine to its first healthy /health (weights read to the GPU, CUDA graphs captured); an autoscaled engine pays it before it can join."""


@dataclass
class OutputParams:
    natural_mean_tokens: int = 256
    """Mean response length when the client lets the model stop by itself (no ignore_eos): geometric."""
    logprob_mean: float = -0.45
    """Mean sampled-token logprob at temperature 1 (exponential); greedy tokens get a tenth of it."""


@dataclass
class EngineProfile:
    name: str = "unnamed"
    """Human-readable name of the model + GPU this profile describes."""
    notes: str = ""
    """Where the numbers come from."""
    decode: DecodeParams = field(default_factory=DecodeParams)
    prefill: PrefillParams = field(default_factory=PrefillParams)
    capacity: CapacityParams = field(default_factory=CapacityParams)
    prefix_cache: PrefixCacheParams = field(default_factory=PrefixCacheParams)
    weights: WeightParams = field(default_factory=WeightParams)
    startup: StartupParams = field(default_factory=StartupParams)
    outputs: OutputParams = field(default_factory=OutputParams)


# --------------------------------------------------------------------------- workload profile
@dataclass
class Dist:
    """A 1-D distribution, written in TOML as an inline table.

    {dist = "const", value = 3} | {dist = "uniform", low = 1, high = 4} |
    {dist = "lognormal", median = 600, sigma = 0.6, min = 50, max = 4000} |
    {dist = "geometric", mean = 6, min = 1, max = 20}
    Lognormal and geometric are the long-tailed shapes agent traces show; min/max clip.
    """

    dist: str = "const"
    value: float = 0.0
    low: float = 0.0
    high: float = 0.0
    median: float = 1.0
    sigma: float = 0.5
    mean: float = 1.0
    min: float = -math.inf
    max: float = math.inf

    KINDS = ("const", "uniform", "lognormal", "geometric")

    def validate(self, where: str) -> None:
        if self.dist not in self.KINDS:
            raise ProfileError(f"{where}.dist must be one of {self.KINDS}, got {self.dist!r}")
        if self.dist == "lognormal" and (self.median <= 0 or self.sigma < 0):
            raise ProfileError(f"{where}: lognormal needs median > 0 and sigma >= 0")
        if self.dist == "geometric" and self.mean < 1:
            raise ProfileError(f"{where}: geometric needs mean >= 1")
        if self.min > self.max:
            raise ProfileError(f"{where}: min > max")

    def sample(self, rng: random.Random) -> float:
        if self.dist == "const":
            x = self.value
        elif self.dist == "uniform":
            x = rng.uniform(self.low, self.high)
        elif self.dist == "lognormal":
            x = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        else:  # geometric on {1, 2, ...} with the given mean
            p = 1.0 / self.mean
            x = 1.0 if p >= 1.0 else 1.0 + math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - p))
        return min(max(x, self.min), self.max)

    def sample_int(self, rng: random.Random) -> int:
        return int(round(self.sample(rng)))


@dataclass
class BatchParams:
    prompts_per_step: int = 23
    """Prompt groups per training step (rollout.prompts_per_step)."""
    samples_per_prompt: int = 8
    """Rollouts per prompt (rollout.samples_per_prompt)."""


@dataclass
class TrainParams:
    time_s: float = 400.0
    """Trainer time per step in real seconds (trainer.sim.train_time_s)."""
    weight_size_gb: float = 0.02
    """Size of the weight version the sim trainer publishes per step (real bytes written)."""


@dataclass
class AgentParams:
    max_context_tokens: int = 32768
    """A rollout ends (truncated) when its context would pass this."""
    prompt_tokens: Dist = field(default_factory=lambda: Dist("const", value=2000))
    """Initial context: system prompt + task statement (shared by the samples of a group)."""
    turns: Dist = field(default_factory=lambda: Dist("const", value=1))
    """Model turns per rollout (the agent submits or hits the step limit)."""
    output_tokens: Dist = field(default_factory=lambda: Dist("const", value=256))
    """Tokens the model generates per turn (reasoning + one action)."""
    observation_tokens: Dist = field(default_factory=lambda: Dist("const", value=256))
    """Tool output + chat template tokens appended after each turn but the last."""
    tool_time_s: Dist = field(default_factory=lambda: Dist("const", value=0.0))
    """Sandbox time per tool call, real seconds (slept scaled by time_scale)."""
    eval_time_s: Dist = field(default_factory=lambda: Dist("const", value=0.0))
    """Grading time at the end of a rollout (run the tests), real seconds."""
    solve_rate: float = 0.3
    """Probability that a rollout earns reward 1 (drawn per sample, seeded)."""


@dataclass
class DemandParams:
    turns_scale: list[list[float]] = field(default_factory=list)
    """How demand changes as the policy trains: [[weight version, factor], ...] with rising versions, read piecewise-linearly (flat before the first point and after the last). Each rollout's drawn turn count is multiplied by the factor at the version its group starts on, as a policy that learns to take more turns makes rollouts longer. Empty: demand never changes."""

    def turns_factor(self, version: float) -> float:
        points = self.turns_scale
        if not points:
            return 1.0
        if version <= points[0][0]:
            return points[0][1]
        for (v0, f0), (v1, f1) in zip(points, points[1:]):
            if version <= v1:
                return f0 + (f1 - f0) * (version - v0) / (v1 - v0)
        return points[-1][1]


@dataclass
class WorkloadProfile:
    name: str = "unnamed"
    """What this workload mirrors."""
    notes: str = ""
    """How it was derived."""
    batch: BatchParams = field(default_factory=BatchParams)
    train: TrainParams = field(default_factory=TrainParams)
    agent: AgentParams = field(default_factory=AgentParams)
    demand: DemandParams = field(default_factory=DemandParams)


# --------------------------------------------------------------------------- loading
def _build(cls: type, tree: dict[str, Any], where: str) -> Any:
    """Build dataclass `cls` from a TOML table, recursing into nested dataclasses and `Dist`s."""
    if not isinstance(tree, dict):
        raise ProfileError(f"{where or 'profile'} must be a table, got {tree!r}")
    hints = get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for key, value in tree.items():
        dotted = f"{where}.{key}" if where else key
        if key not in names:
            raise ProfileError(f"unknown key '{dotted}'")
        typ = hints[key]
        if isinstance(typ, type) and dataclasses.is_dataclass(typ):
            obj = _build(typ, value, dotted)
            if isinstance(obj, Dist):
                obj.validate(dotted)
            kwargs[key] = obj
        elif typ is float:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ProfileError(f"'{dotted}' must be a number, got {value!r}")
            kwargs[key] = float(value)
        elif typ is int:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ProfileError(f"'{dotted}' must be an integer, got {value!r}")
            kwargs[key] = value
        elif typ is bool:
            if not isinstance(value, bool):
                raise ProfileError(f"'{dotted}' must be true or false, got {value!r}")
            kwargs[key] = value
        elif typ is str:
            if not isinstance(value, str):
                raise ProfileError(f"'{dotted}' must be a string, got {value!r}")
            kwargs[key] = value
        elif typ == list[list[float]]:
            kwargs[key] = _points(value, dotted)
        else:  # pragma: no cover - every field above has one of these types
            raise ProfileError(f"'{dotted}': unsupported type {typ}")
    return cls(**kwargs)


def _points(value: Any, dotted: str) -> list[list[float]]:
    """[[x, y], ...] with numbers, x strictly rising and y >= 0 (a piecewise-linear schedule)."""
    ok = isinstance(value, list) and all(
        isinstance(pt, list) and len(pt) == 2 and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                                      for v in pt) for pt in value)
    if not ok:
        raise ProfileError(f"'{dotted}' must be a list of [x, y] number pairs, got {value!r}")
    points = [[float(x), float(y)] for x, y in value]
    if any(b[0] <= a[0] for a, b in zip(points, points[1:])) or any(y < 0 for _, y in points):
        raise ProfileError(f"'{dotted}' needs strictly rising x and y >= 0, got {value!r}")
    return points


def _read(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.exists():
        raise ProfileError(f"profile '{p}' does not exist")
    try:
        return tomllib.loads(p.read_text())
    except tomllib.TOMLDecodeError as err:
        raise ProfileError(f"profile '{p}' is not valid TOML: {err}") from None


def engine_profile_from_dict(tree: dict[str, Any]) -> EngineProfile:
    prof = _build(EngineProfile, tree, "")
    _check_engine(prof)
    return prof


def load_engine_profile(path: str | Path) -> EngineProfile:
    try:
        return engine_profile_from_dict(_read(path))
    except ProfileError as err:
        raise ProfileError(f"{path}: {err}") from None


def workload_profile_from_dict(tree: dict[str, Any]) -> WorkloadProfile:
    prof = _build(WorkloadProfile, tree, "")
    if prof.batch.prompts_per_step < 1 or prof.batch.samples_per_prompt < 1:
        raise ProfileError("batch.prompts_per_step and batch.samples_per_prompt must be >= 1")
    if not 0.0 <= prof.agent.solve_rate <= 1.0:
        raise ProfileError("agent.solve_rate must be in [0, 1]")
    return prof


def load_workload_profile(path: str | Path) -> WorkloadProfile:
    try:
        return workload_profile_from_dict(_read(path))
    except ProfileError as err:
        raise ProfileError(f"{path}: {err}") from None


def _check_engine(p: EngineProfile) -> None:
    checks = [
        ("decode.base_ms", p.decode.base_ms > 0),
        ("decode.per_seq_ms", p.decode.per_seq_ms >= 0),
        ("decode.per_kv_token_us", p.decode.per_kv_token_us >= 0),
        ("prefill.base_ms", p.prefill.base_ms >= 0),
        ("prefill.per_token_us", p.prefill.per_token_us >= 0),
        ("prefill.attn_us_per_token_per_1k_ctx", p.prefill.attn_us_per_token_per_1k_ctx >= 0),
        ("prefill.chunk_tokens", p.prefill.chunk_tokens >= 1),
        ("capacity.max_total_tokens", p.capacity.max_total_tokens >= 1),
        ("capacity.max_running_requests", p.capacity.max_running_requests >= 1),
        ("capacity.context_length", p.capacity.context_length >= 2),
        ("capacity.clip_max_new_tokens", p.capacity.clip_max_new_tokens >= 0),
        ("capacity.min_new_token_ratio", 0 <= p.capacity.min_new_token_ratio <= p.capacity.init_new_token_ratio <= 1),
        ("capacity.new_token_ratio_decay_steps", p.capacity.new_token_ratio_decay_steps >= 1),
        ("prefix_cache.block_tokens", p.prefix_cache.block_tokens >= 1),
        ("weights.reload_s", p.weights.reload_s >= 0),
        ("startup.server_s", p.startup.server_s >= 0),
        ("outputs.natural_mean_tokens", p.outputs.natural_mean_tokens >= 1),
        ("outputs.logprob_mean", p.outputs.logprob_mean <= 0),
    ]
    for key, ok in checks:
        if not ok:
            raise ProfileError(f"'{key}' is out of range")
