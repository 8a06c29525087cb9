"""One typed config tree for the whole run.

config.toml maps 1:1 onto `TandemConfig`. Every field carries a docstring, which is
also what `python train.py --help` prints. Any key can be overridden on the command
line as `--section.key value`; a few shorthands (`--engines`, `--mode`, ...) map onto
keys. Unknown keys and bad values fail at once with the dotted key in the message.
"""

from __future__ import annotations

import os
import sys
import tomllib
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator


class ConfigError(ValueError):
    """A config problem, phrased for the user; its message names the offending key."""


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True, validate_assignment=True)


# --------------------------------------------------------------------------- run
class RunConfig(Section):
    mode: Literal["sync", "async"] = "async"
    """sync: rollout, then train, then sync weights. async: the rollout of step k+1 overlaps training on step k, bounded by rollout.max_staleness."""
    steps: int = 200
    """Number of optimizer steps (trainer steps) to run."""
    run_dir: str = "runs/default"
    """Directory for logs, weights, metrics and endpoints.json of this run."""
    seed: int = 0
    """Seed for data order, sampling and model init."""
    cache_dir: str = ".cache/tandem"
    """Where locally built assets (the tiny model) are cached across runs."""


# --------------------------------------------------------------------------- model
class TinyModelConfig(Section):
    hidden_size: int = 64
    """Hidden size of the locally built tiny Qwen3 model."""
    num_layers: int = 2
    """Number of transformer layers of the tiny model."""
    num_heads: int = 4
    """Attention heads of the tiny model."""
    num_kv_heads: int = 2
    """Key/value heads (GQA) of the tiny model."""
    head_dim: int = 16
    """Per-head dimension of the tiny model."""
    intermediate_size: int = 256
    """MLP width of the tiny model."""
    max_position_embeddings: int = 4096
    """Longest context of the tiny model."""


class ModelConfig(Section):
    path: str = "tiny"
    """'tiny' builds a tiny Qwen3-architecture model and byte tokenizer locally (no download); otherwise an HF model id (e.g. Qwen/Qwen3-0.6B) or a local directory, loaded through transformers."""
    dtype: Literal["float32", "bfloat16", "float16"] = "float32"
    """Parameter dtype for trainer and engines."""
    trust_remote_code: bool = False
    """Passed to transformers when loading model.path."""
    tiny: TinyModelConfig = TinyModelConfig()
    """Shape of the locally built tiny model (used when path = 'tiny')."""


# --------------------------------------------------------------------------- engine
class SimEngineConfig(Section):
    profile: str = "profiles/engine/qwen3_14b_h100.toml"
    """Latency-model profile (TOML) for engine.backend = 'sim'."""
    time_scale: float = 100.0
    """How many times faster than real time the sim runs: sim engines, the sim trainer's train time and the sim workload's tool time all divide by it."""
    workload: str = "profiles/workload/reference_agentic.toml"
    """Workload profile (TOML) read by the sim rollout plug-in tandem.sim.workload:agentic_rollout (turns, tokens and tool time per rollout)."""
    token_scale: int = 1
    """Each token on the wire stands for this many modelled tokens (sim engines and the sim workload agree on it): long agent contexts cost k times less HTTP/JSON work on a small machine, while the modelled GPU timing is unchanged."""


class EngineConfig(Section):
    backend: Literal["embedded", "sglang", "sim"] = "embedded"
    """embedded: tandem's own SGLang-API server over an HF model (CPU or CUDA). sglang: real SGLang servers. sim: a latency-model engine for sizing studies."""
    count: int = 2
    """Number of engine processes (one GPU each on a GPU node)."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where embedded engines run; auto picks cuda when GPUs exist."""
    max_running_requests: int = 64
    """Most requests an engine decodes in one batch; the rest wait in a FIFO queue."""
    max_total_tokens: int = 262144
    """KV budget in tokens across the running batch (prompt + generated)."""
    priority_scheduling: bool = True
    """Serve each engine's waiting queue by request priority (SGLang --enable-priority-scheduling, without preemption of running requests). The rollout producer gives every request the priority of its training step, older steps first, so the step the trainer waits on is served before rollouts started early for the next one."""
    startup_timeout_s: float = 180.0
    """How long an engine may take to answer /health before the run is stopped."""
    base_port: int = 0
    """First engine port on 127.0.0.1 (engine i uses base_port + i); 0 picks free ports."""
    mem_fraction_static: float = 0.85
    """SGLang --mem-fraction-static for engine.backend = 'sglang'."""
    sglang_args: dict[str, Any] = {}
    """Extra SGLang server arguments, passed through as --key value (e.g. {context_length = 32768})."""
    sim: SimEngineConfig = SimEngineConfig()
    """Settings of the simulated engine."""


class RouterConfig(Section):
    port: int = 0
    """Router port on 127.0.0.1; 0 picks a free port."""
    policy: Literal["random", "round_robin", "cache_aware", "power_of_two", "manual"] = "manual"
    """sglang-router load-balancing policy. 'manual' keeps every request that carries the same
    routing key (x-smg-routing-key: one per agent trajectory) on one engine, so each turn finds
    the previous turns in that engine's prefix cache instead of re-prefilling the whole context."""
    assignment_mode: Literal["random", "min_load", "min_group"] = "min_load"
    """With policy 'manual': where a new routing key goes (sglang-router --assignment-mode):
    'min_load' = the engine with the fewest requests in flight."""
    startup_timeout_s: float = 60.0
    """How long the router may take to come up and see every engine."""
    health_check_interval_s: int = 5
    """sglang-router --health-check-interval-secs."""


# --------------------------------------------------------------------------- rollout
class RolloutConfig(Section):
    function: str = "rollout:single_turn"
    """Rollout plug-in, 'module:function' or 'path/to/file.py:function'; it turns one prompt row into a group of samples."""
    reward: str = "reward:echo_reward"
    """Reward plug-in, 'module:function' or 'file.py:function'."""
    data_path: str = "data/echo/train.jsonl"
    """Local JSONL or parquet dataset, loaded with `datasets`."""
    prompt_key: str = "prompt"
    """Dataset field holding the prompt (a string, or a list of chat messages)."""
    label_key: str = "label"
    """Dataset field holding the label handed to the reward function."""
    apply_chat_template: bool = False
    """Wrap string prompts as a user message and apply the tokenizer's chat template."""
    prompts_per_step: int = 8
    """Groups (prompts) per training step."""
    samples_per_prompt: int = 16
    """G: samples drawn per prompt."""
    oversample: float = 1.0
    """Start ceil(prompts_per_step * oversample) groups per step and train on the first prompts_per_step to finish."""
    max_new_tokens: int = 8
    """Longest response per generation call."""
    temperature: float = 1.0
    """Sampling temperature (the trainer scores with the same temperature)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    top_k: int = -1
    """Top-k sampling; -1 disables it."""
    stop: list[str] = []
    """Stop strings."""
    concurrency: int = 256
    """Most generation requests in flight from the orchestrator at once."""
    max_staleness: int = 1
    """Async mode: the most weight versions a trained-on sample may lag the trainer. Sync mode forces 0."""
    partial_rollout: Literal["drain", "abort", "continue"] = "continue"
    """What in-flight rollouts do at a weight update: drain (finish, then sync), abort (abort and regenerate the group), continue (keep decoding on the new weights)."""
    request_timeout_s: float = 300.0
    """Timeout of one generation request."""
    reward_timeout_s: float = 30.0
    """A reward call that runs longer scores 0 with reason 'timeout'."""
    shuffle: bool = True
    """Shuffle the dataset each epoch (seeded by run.seed)."""


# --------------------------------------------------------------------------- trainer
class LossConfig(Section):
    eps_clip: float = 0.2
    """PPO lower clip: ratio is clipped at 1 - eps_clip."""
    eps_clip_high: float = 0.28
    """PPO upper clip: ratio is clipped at 1 + eps_clip_high (asymmetric, DAPO-style)."""
    dual_clip_c: float | None = None
    """Dual-clip constant c > 1 for negative advantages; None disables it."""
    use_std_norm: bool = True
    """GRPO: divide group-centred rewards by the group std (turned off automatically when G = 1)."""
    kl_coef: float = 0.0
    """Weight of the KL penalty to the frozen reference model; 0 disables the reference."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """KL estimator: k1 = x, k2 = x^2/2, k3 = exp(-x) - 1 + x with x = logp - logp_ref."""
    entropy_coef: float = 0.0
    """Entropy bonus weight (entropy is always reported)."""
    aggregation: Literal["seq_mean_token_mean", "token_mean"] = "seq_mean_token_mean"
    """Loss aggregation: mean over samples of each sample's token mean, or one mean over all tokens."""
    tis: bool = False
    """Truncated importance sampling on exp(logp_old - logp_rollout) to correct engine/trainer mismatch."""
    tis_clip_high: float = 2.0
    """Upper clamp of the TIS weight."""


class SimTrainerConfig(Section):
    train_time_s: float = 400.0
    """Simulated train time per step, in (unscaled) seconds."""
    weight_size_gb: float = 0.01
    """Size of the weight version the sim trainer publishes each step."""


class MegatronConfig(Section):
    tensor_parallel: int = 2
    """Megatron tensor-parallel size."""
    pipeline_parallel: int = 1
    """Megatron pipeline-parallel size."""
    use_distributed_optimizer: bool = True
    """Shard optimizer state across data-parallel ranks."""
    bf16: bool = True
    """Train in bf16 with fp32 master weights."""
    recompute: bool = False
    """Recompute each layer's activations in the backward pass (Megatron full recompute): far less memory for long contexts, about a third more compute."""


class TrainerConfig(Section):
    backend: Literal["torch", "megatron", "sim"] = "torch"
    """torch: an HF causal LM trained with plain torch (CPU or one GPU). megatron: megatron-core across trainer.gpus. sim: a timed stand-in for sizing studies."""
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where the torch trainer runs."""
    gpus: int = 4
    """GPUs given to the trainer on a GPU node (engines take the following ones)."""
    lr: float = 2e-3
    """AdamW learning rate."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    betas: tuple[float, float] = (0.9, 0.99)
    """AdamW betas."""
    grad_clip: float = 1.0
    """Clip the global gradient norm to this value (0 disables clipping)."""
    micro_batch_size: int = 16
    """Samples per forward/backward micro-batch (gradients accumulate)."""
    minibatches: int = 1
    """Optimizer steps per training step; the batch is split into this many mini-batches."""
    loss: LossConfig = LossConfig()
    """Policy-loss settings shared by every trainer backend."""
    megatron: MegatronConfig = MegatronConfig()
    """Settings of the megatron backend."""
    sim: SimTrainerConfig = SimTrainerConfig()
    """Settings of the sim backend."""


# --------------------------------------------------------------------------- sync
class SyncConfig(Section):
    every_k_steps: int = 1
    """Publish weights and reload engines after every k optimizer steps."""
    keep_last: int = 3
    """Weight versions kept on disk; older ones are pruned."""
    reload_timeout_s: float = 300.0
    """Timeout of one engine's /update_weights_from_disk."""
    trainer_timeout_s: float = 1800.0
    """How long the orchestrator waits for one training step before stopping the run."""


# --------------------------------------------------------------------------- logging
class LoggingConfig(Section):
    live: Literal["auto", "on", "off"] = "auto"
    """Rich live view in the terminal; auto shows it when stdout is a TTY, else prints one line per step."""
    tensorboard: bool = True
    """Write TensorBoard event files under <run_dir>/tensorboard."""
    queue_sample_interval_s: float = 0.5
    """How often each engine's /get_load is sampled into queue.jsonl."""


# --------------------------------------------------------------------------- agent (coding rollouts)
class AgentConfig(Section):
    max_turns: int = 20
    """Most model turns per episode (a format error uses up a turn); the episode then ends with 'turn_limit'."""
    max_context_tokens: int = 32768
    """Longest trajectory (prompt + every turn + observations) in tokens; the episode ends with 'context_limit' before exceeding it."""
    min_turn_tokens: int = 16
    """End with 'context_limit' when fewer tokens than this are left for the next reply."""
    wall_time_s: float = 1800.0
    """Wall-clock budget of one episode (generation + commands); past it the episode ends with 'wall_clock'."""
    output_max_chars: int = 10000
    """Command output longer than this is shown as its first and last half (mini-swe-agent: 10k, 5k + 5k)."""
    action_regex: str = "```bash\\s*\\n(.*?)\\n```"
    """Regex (DOTALL) that finds the bash action in a reply; exactly one match is a valid turn."""
    submit_sentinel: str = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"
    """The episode ends ('submitted') when a command's first output line is this string."""
    prompt_file: str = ""
    """TOML file overriding system_template / instance_template / format_error_template / observation_template (Jinja2); empty = built-in mini-swe-agent-style prompts."""
    chat_template_kwargs: dict[str, Any] = {}
    """Extra arguments for tokenizer.apply_chat_template (e.g. {enable_thinking = false} for Qwen3)."""


class SandboxConfig(Section):
    backend: Literal["auto", "bwrap", "unshare"] = "auto"
    """How commands are isolated: bwrap (bubblewrap), unshare (util-linux namespaces + rlimits), or auto (bwrap when installed, else unshare)."""
    root_dir: str = ""
    """Where sandbox working copies live; empty = <run.run_dir>/sandboxes."""
    pool_size: int = 0
    """Warm sandbox slots; 0 = the number of rollouts that can be in flight (groups per step x samples x (staleness + 1))."""
    command_timeout_s: float = 60.0
    """Wall-clock limit of one agent command; the whole process tree is killed past it."""
    test_timeout_s: float = 120.0
    """Wall-clock limit of the hidden-test run when grading."""
    test_plugin_autoload: bool = False
    """Let pytest auto-load installed plugins when grading (off: faster and deterministic; turn on for repositories whose tests need e.g. pytest-asyncio)."""
    cpu_time_s: int = 60
    """RLIMIT_CPU per process inside the sandbox, in seconds."""
    memory_mb: int = 2048
    """RLIMIT_AS (address space) per process inside the sandbox, in MiB."""
    max_processes: int = 64
    """RLIMIT_NPROC: most processes/threads the sandbox user may run (stops fork bombs)."""
    max_file_mb: int = 64
    """RLIMIT_FSIZE: largest file a sandboxed process may write, in MiB."""
    max_open_files: int = 256
    """RLIMIT_NOFILE inside the sandbox."""
    max_workdir_mb: int = Field(512, ge=1)
    """Disk cap of one sandbox (repo + /tmp + its git baseline). As root each slot is a tmpfs of this size (in RAM), so writes past it fail with ENOSPC; without root usage is measured after each command and passing it ends the episode with 'disk_limit'."""
    max_inodes: int = Field(50000, ge=100)
    """Files and directories one sandbox may hold (the tmpfs inode cap; root only, like the byte cap)."""
    max_infra_failures: int = Field(5, ge=1)
    """Samples in a row lost to the sandbox itself (reward 0, reason 'sandbox failure') before the run stops with the cause."""
    max_output_bytes: int = 1000000
    """Bytes of command output kept (head and tail); the rest is dropped while reading, so `yes` cannot fill memory."""
    prepare_retries: int = 4
    """Extra attempts at checking out a task's repository before the rollout fails (the reference run lost ~11% of checkouts under load without retries)."""
    base_uid: int = 61000
    """When tandem runs as root, sandbox slot k runs as the unprivileged uid base_uid + k (per-slot process limits, no access to root's files)."""
    python: str = ""
    """Python interpreter made available inside the sandbox as `python`; empty = the interpreter running tandem (its packages, e.g. pytest, come with it)."""
    extra_ro_paths: list[str] = []
    """Additional host paths bound read-only at the same place inside the sandbox (e.g. a conda env with a task's dependencies)."""


# --------------------------------------------------------------------------- faults
class CheckpointConfig(Section):
    interval: int = 10
    """Save a checkpoint every this many steps (and after the last); 0 disables checkpoints."""
    keep_last: int = 2
    """Complete checkpoints kept on disk; older ones are removed."""


class FaultsConfig(Section):
    max_engine_restarts: int = 3
    """Engine crashes (or hangs) the run survives by restarting the engine; one more stops the run. 0: any engine death stops the run."""
    engine_check_interval_s: float = 1.0
    """How often the engine doctor checks each engine's process and /health."""
    engine_unresponsive_s: float = 10.0
    """An engine whose /health has not answered for this long is declared hung, killed and replaced."""
    stall_warning_s: float = 600.0
    """The watchdog reports (with what is waiting on what) when no step has finished for this long."""


# --------------------------------------------------------------------------- root
class TandemConfig(Section):
    run: RunConfig = RunConfig()
    """Run-wide settings."""
    model: ModelConfig = ModelConfig()
    """The policy model."""
    engine: EngineConfig = EngineConfig()
    """Inference engines."""
    router: RouterConfig = RouterConfig()
    """sglang-router in front of the engines."""
    rollout: RolloutConfig = RolloutConfig()
    """Rollout generation and the data it draws from."""
    trainer: TrainerConfig = TrainerConfig()
    """The trainer and its loss."""
    sync: SyncConfig = SyncConfig()
    """Weight sync through local disk."""
    logging: LoggingConfig = LoggingConfig()
    """Metrics and the live view."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoints for `--resume`."""
    faults: FaultsConfig = FaultsConfig()
    """Engine crash recovery and the stall watchdog."""
    agent: AgentConfig = AgentConfig()
    """The multi-turn coding agent (rollout function tandem.agent:swe_agent_rollout)."""
    sandbox: SandboxConfig = SandboxConfig()
    """Isolation and limits for agent commands and hidden-test grading."""

    @model_validator(mode="after")
    def _consistent(self) -> "TandemConfig":
        checks = [
            ("engine.count", self.engine.count >= 1, "must be at least 1"),
            ("run.steps", self.run.steps >= 1, "must be at least 1"),
            ("rollout.samples_per_prompt", self.rollout.samples_per_prompt >= 1, "must be at least 1"),
            ("rollout.prompts_per_step", self.rollout.prompts_per_step >= 1, "must be at least 1"),
            ("rollout.max_staleness", self.rollout.max_staleness >= 0, "must be >= 0"),
            ("rollout.oversample", self.rollout.oversample >= 1.0, "must be >= 1.0"),
            ("rollout.concurrency", self.rollout.concurrency >= 1, "must be at least 1"),
            ("engine.sim.token_scale", self.engine.sim.token_scale >= 1, "must be at least 1"),
            ("engine.sim.time_scale", self.engine.sim.time_scale > 0, "must be > 0"),
            ("trainer.micro_batch_size", self.trainer.micro_batch_size >= 1, "must be at least 1"),
            ("trainer.minibatches", self.trainer.minibatches >= 1, "must be at least 1"),
            ("sync.every_k_steps", self.sync.every_k_steps >= 1, "must be at least 1"),
            ("sync.keep_last", self.sync.keep_last >= 1, "must be at least 1"),
            ("checkpoint.interval", self.checkpoint.interval >= 0, "must be >= 0"),
            ("checkpoint.keep_last", self.checkpoint.keep_last >= 1, "must be at least 1"),
            ("faults.max_engine_restarts", self.faults.max_engine_restarts >= 0, "must be >= 0"),
            ("trainer.gpus", self.trainer.backend != "megatron" or self.trainer.gpus % (
                self.trainer.megatron.tensor_parallel * self.trainer.megatron.pipeline_parallel) == 0,
             f"({self.trainer.gpus}) must be a multiple of trainer.megatron.tensor_parallel x pipeline_parallel"),
            ("trainer.loss.dual_clip_c", self.trainer.loss.dual_clip_c is None or self.trainer.loss.dual_clip_c > 1,
             "must be > 1 (or unset)"),
            # Engines can only serve versions that were published; a staleness bound tighter
            # than the publish interval would make the rollout wait forever.
            ("sync.every_k_steps", self.sync.every_k_steps - 1 <= self.effective_staleness,
             f"is {self.sync.every_k_steps}, but with staleness bound {self.effective_staleness} "
             f"(run.mode={self.run.mode}) weights must be synced at least every "
             f"{self.effective_staleness + 1} step(s)"),
        ]
        for key, ok, why in checks:
            if not ok:
                raise ValueError(f"{key} {why}")
        return self

    @property
    def effective_staleness(self) -> int:
        """Sync mode is the same loop with a staleness bound of 0."""
        return 0 if self.run.mode == "sync" else self.rollout.max_staleness


# --------------------------------------------------------------------------- loading
SHORTHANDS = {
    "--engines": "engine.count",
    "--mode": "run.mode",
    "--steps": "run.steps",
    "--run-dir": "run.run_dir",
    "--seed": "run.seed",
    "--model": "model.path",
}
# Options handled by train.py itself, listed here so --help shows them.
LAUNCHER_OPTIONS = {"--resume DIR": "continue the run in DIR from its latest complete checkpoint"}
DEFAULT_CONFIG_FILE = "config.toml"


def _parse_value(text: str) -> Any:
    """CLI values are read as TOML literals when they parse (numbers, bools, lists), else as strings."""
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    node = tree
    parts = dotted.split(".")
    for part in parts[:-1]:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(f"config key '{dotted}': '{part}' is a value, not a section")
        node = child
    node[parts[-1]] = value


def _check_known(model: type[BaseModel], tree: dict, prefix: str = "") -> None:
    """Fail on the first unknown key, naming it with its full dotted path."""
    for key, value in tree.items():
        dotted = f"{prefix}{key}"
        field = model.model_fields.get(key)
        if field is None:
            while isinstance(value, dict) and value:  # name the full key the user typed
                key, value = next(iter(value.items()))
                dotted = f"{dotted}.{key}"
            raise ConfigError(f"unknown config key '{dotted}'")
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            if not isinstance(value, dict):
                raise ConfigError(f"config key '{dotted}' is a section; got the value {value!r}")
            _check_known(sub, value, dotted + ".")


def _format_validation_error(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        key = ".".join(str(p) for p in e["loc"] if not str(p).isdigit() or True)
        msg = e["msg"].removeprefix("Value error, ")
        if key:
            got = e.get("input")
            got_text = "" if isinstance(got, dict) else f" (got {got!r})"
            lines.append(f"config key '{key}': {msg}{got_text}")
        else:
            lines.append(f"config: {msg}")
    return "; ".join(lines)


def build_config(tree: dict) -> TandemConfig:
    _check_known(TandemConfig, tree)
    try:
        return TandemConfig.model_validate(tree)
    except ValidationError as err:
        raise ConfigError(_format_validation_error(err)) from None


def parse_cli(argv: list[str]) -> tuple[str | None, dict[str, Any], bool]:
    """Split argv into (config file, dotted overrides, help requested)."""
    config_file, overrides, want_help = None, {}, False
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg in ("-h", "--help"):
            want_help = True
            i += 1
            continue
        if not arg.startswith("--"):
            raise ConfigError(f"unexpected argument '{arg}' (options look like --section.key value)")
        name, eq, inline = arg.partition("=")
        if eq:
            value, i = inline, i + 1
        else:
            if i + 1 >= len(argv):
                raise ConfigError(f"option '{name}' needs a value")
            value, i = argv[i + 1], i + 2
        if name == "--config":
            config_file = value
        elif name in SHORTHANDS:
            overrides[SHORTHANDS[name]] = _parse_value(value)
        elif name.startswith("--") and "." in name:
            overrides[name[2:]] = _parse_value(value)
        else:
            raise ConfigError(f"unknown option '{name}' (see --help)")
    return config_file, overrides, want_help


def load_config(argv: list[str] | None = None, *, config_file: str | None = None,
                base_tree: dict | None = None) -> TandemConfig:
    """Load config.toml (or --config FILE, or a given base tree), apply CLI overrides, validate."""
    argv = list(sys.argv[1:] if argv is None else argv)
    cli_file, overrides, want_help = parse_cli(argv)
    if want_help:
        print(help_text())
        raise SystemExit(0)
    path = cli_file or config_file
    tree: dict[str, Any] = dict(base_tree or {})
    if base_tree is not None and cli_file:
        raise ConfigError("--config cannot be combined with --resume (the run's own config.json is used)")
    if base_tree is not None:
        path = None
    elif path is None and Path(DEFAULT_CONFIG_FILE).exists():
        path = DEFAULT_CONFIG_FILE
    if path is not None:
        if not Path(path).exists():
            raise ConfigError(f"config file '{path}' does not exist")
        try:
            tree = tomllib.loads(Path(path).read_text())
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"config file '{path}' is not valid TOML: {err}") from None
    for dotted, value in overrides.items():
        _set_dotted(tree, dotted, value)
    return build_config(tree)


def config_from_json(path: str | os.PathLike) -> TandemConfig:
    """Children read the launcher's resolved config, so every process sees the same values."""
    return TandemConfig.model_validate_json(Path(path).read_text())


# --------------------------------------------------------------------------- help
def _type_name(annotation: Any) -> str:
    origin = get_origin(annotation)
    if origin is Literal:
        return "|".join(str(a) for a in get_args(annotation))
    if origin is not None:
        return str(annotation).replace("typing.", "")
    return getattr(annotation, "__name__", str(annotation))


def _help_rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    rows = []
    for name, field in model.model_fields.items():
        sub = field.annotation
        if isinstance(sub, type) and issubclass(sub, BaseModel):
            rows.extend(_help_rows(sub, f"{prefix}{name}."))
        else:
            rows.append((f"--{prefix}{name}", _type_name(sub), repr(field.default), field.description or ""))
    return rows


def help_text() -> str:
    lines = [
        "usage: python train.py [--config FILE] [--engines N] [--mode sync|async] [--steps S] [--run-dir DIR] [--section.key VALUE ...]",
        "",
        "tandem: single-node RL post-training. Every key of config.toml can be overridden as --section.key VALUE",
        "(values are TOML literals: 3, 1e-3, true, '[\"a\", \"b\"]'; anything else is a string).",
        "",
        "shorthands:",
        "  --config FILE        config file to load (default: ./config.toml when present)",
    ]
    lines += [f"  {flag:<20} = --{key}" for flag, key in SHORTHANDS.items()]
    lines += [f"  {flag:<20} {doc}" for flag, doc in LAUNCHER_OPTIONS.items()]
    lines += ["", "config keys:"]
    for flag, typ, default, doc in _help_rows(TandemConfig):
        lines.append(f"  {flag} ({typ}, default {default})")
        if doc:
            lines.append(f"      {doc}")
    return "\n".join(lines)
