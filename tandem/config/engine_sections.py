"""The engine and router sections of the config tree: [engine] and [router].

[engine] is by backend: the keys every engine reads, and one sub-table per backend that exists
only for it ([engine.embedded], [engine.sglang], [engine.sim], [engine.external]). Like every
section, each field carries its docstring."""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator, model_validator

from tandem.config.autoscale_section import AutoscaleConfig
from tandem.config.base import Port, Section, by_backend, rule_broken


# --------------------------------------------------------------------------- engine
class EmbeddedEngineSettings(Section):
    device: Literal["auto", "cpu", "cuda"] = "auto"
    """Where embedded engines run; auto picks cuda when GPUs exist."""
    admission_window_ms: float = Field(3.0, ge=0)
    """An idle engine that receives requests waits until none has arrived for this long (at most ten times it, and at most two of its decode steps) before its first prefill, so a step's burst of groups prefills together and decodes without padding (which makes SDPA take a slower masked kernel). 0: start at the first request."""


class SglangEngineSettings(Section):
    device: Literal["cuda", "cpu"] = "cuda"
    """Where the SGLang servers run: cuda (one GPU each) or cpu (SGLang's CPU engine: --device cpu with SGLANG_USE_CPU_ENGINE=1, a KV pool of engine.max_total_tokens tokens; it needs sgl-kernel's CPU extension, see docs/deployment.md). On cpu no GPU is asked for."""
    mem_fraction_static: float = Field(0.85, gt=0.0, lt=1.0)
    """SGLang --mem-fraction-static: the fraction of GPU memory (with device = "cpu": of the host's memory) for weights and the KV cache."""
    env: dict[str, str] = {}
    """Environment variables every SGLang server gets on top of tandem's (e.g. {SGLANG_CPU_OMP_THREADS_BIND = "0-15"})."""
    args: dict[str, Any] = {}
    """Extra SGLang server arguments, passed through as --key value (e.g. {context_length = 32768}); each is checked against SGLang's argument list."""


class SimEngineSettings(Section):
    profile: str = "profiles/engine/qwen3_14b_h100.toml"
    """Latency-model profile (TOML) of the simulated engine."""
    time_scale: float = Field(100.0, gt=0)
    """How many times faster than real time the sim runs: sim engines, the sim trainer's train time and the sim workload's tool time all divide by it."""
    workload: str = "profiles/workload/reference_agentic.toml"
    """Workload profile (TOML) read by the sim rollout plug-in tandem.lab.sim.workload:agentic_rollout (turns, tokens and tool time per rollout)."""
    token_scale: int = Field(1, ge=1)
    """Each token on the wire stands for this many modelled tokens (sim engines and the sim workload agree on it): long agent contexts cost k times less HTTP/JSON work on a small machine, while the modelled GPU timing is unchanged."""


class ExternalEngineSettings(Section):
    urls: list[str] = []
    """Base URLs of running engines (real SGLang servers, or `python -m tandem.engine serve` on other hosts), e.g. ["http://engine0-0.myjob:30000"]; engine.count follows the list."""

    @field_validator("urls")
    @classmethod
    def _urls_are_http(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"{url!r} is not an http(s):// base URL")
        if len(set(urls)) != len(urls):
            raise ValueError("lists an engine twice")
        return [url.rstrip("/") for url in urls]


class EngineCommon(Section):
    """The keys every engine backend reads; each backend's own settings are its sub-table. A backend is
    one subclass here, named in ENGINE_BACKENDS below: its ClassVars are the one place that says what
    serves, launches and checks it (tandem.registry loads them by name, so the core imports no engine;
    docs/architecture.md, "Adding a backend")."""
    core: ClassVar[str | None] = None
    """'module:Class' of the EngineCore that `python -m tandem.engine` serves (None: tandem does not serve
    this backend's engines)."""
    launch_command: ClassVar[str | None] = None
    """'module:function' (cfg, port=, model_path=) -> argv of an engine that is not tandem's own server."""
    launch_env: ClassVar[str | None] = None
    """'module:function' (cfg) -> environment variables every engine of this backend gets."""
    preflight: ClassVar[str | None] = None
    """'module:function' (cfg) -> problems found before anything starts."""
    count: int = Field(2, ge=1)
    """Number of engine processes (one GPU each on a GPU node); with backend 'external', the number of engine.external.urls."""
    api_key_env: str = ""
    """Name of the environment variable holding the API key the engines require (SGLang --api-key); sent as 'Authorization: Bearer'. Empty: no key."""
    max_running_requests: int = Field(64, ge=1)
    """Most requests an engine decodes in one batch; the rest wait in a FIFO queue."""
    max_total_tokens: int = Field(262144, ge=1)
    """KV budget in tokens across the running batch (prompt + generated)."""
    priority_scheduling: bool = True
    """Serve each engine's waiting queue by request priority (SGLang --enable-priority-scheduling, without preemption of running requests). The rollout producer gives every request the priority of its training step, older steps first, so the step the trainer waits on is served before rollouts started early for the next one."""
    startup_timeout_s: float = Field(180.0, gt=0)
    """How long an engine may take to answer /health before the run is stopped."""
    base_port: Port = 0
    """First engine port on 127.0.0.1 (engine i uses base_port + i); 0 picks free ports."""
    autoscale: AutoscaleConfig = AutoscaleConfig()
    """A fleet that grows and shrinks with demand during the run (off by default)."""


class EmbeddedEngineConfig(EngineCommon):
    backend: Literal["embedded"] = "embedded"
    """tandem's own SGLang-API server over an HF model (CPU or CUDA)."""
    core = "tandem.engine.embedded:EmbeddedCore"
    embedded: EmbeddedEngineSettings = EmbeddedEngineSettings()
    """Settings of the embedded engine (only with engine.backend = "embedded")."""


class SglangEngineConfig(EngineCommon):
    backend: Literal["sglang"] = "sglang"
    """Real SGLang servers, started by the launcher."""
    launch_command = "tandem.engine.sglang_launch:sglang_command"
    launch_env = "tandem.engine.sglang_launch:sglang_env"
    preflight = "tandem.engine.sglang_launch:interpreter_problems"
    sglang: SglangEngineSettings = SglangEngineSettings()
    """Settings of the SGLang servers (only with engine.backend = "sglang")."""


class SimEngineConfig(EngineCommon):
    backend: Literal["sim"] = "sim"
    """A latency-model engine for sizing studies."""
    core = "tandem.lab.sim_engine:SimEngineCore"
    sim: SimEngineSettings = SimEngineSettings()
    """Settings of the simulated engine (only with engine.backend = "sim")."""


class ExternalEngineConfig(EngineCommon):
    backend: Literal["external"] = "external"
    """Engines already running elsewhere (engine.external.urls), which tandem drives but never starts or stops."""
    external: ExternalEngineSettings = ExternalEngineSettings()
    """The running engines (only with engine.backend = "external")."""

    @model_validator(mode="after")
    def _count_is_the_listed_engines(self) -> ExternalEngineConfig:
        if not self.external.urls:
            raise rule_broken("engine.backend = 'external' needs engine.external.urls: the base URLs of the "
                              "running engines")
        # The list is the fleet: count (config.toml always carries one) follows it.
        self.__dict__["count"] = len(self.external.urls)  # no re-validation: this validator set it
        return self


ENGINE_BACKENDS: dict[str, type[EngineCommon]] = {"embedded": EmbeddedEngineConfig, "sglang": SglangEngineConfig,
                                                  "sim": SimEngineConfig, "external": ExternalEngineConfig}
"""engine.backend -> its config model, which names its implementation: the one table of engine backends."""
EngineConfig = by_backend("embedded", ENGINE_BACKENDS)
"""[engine]: the common keys, and the sub-table of engine.backend's own settings."""


class RouterConfig(Section):
    port: Port = 0
    """Router port on 127.0.0.1; 0 picks a free port."""
    policy: Literal["random", "round_robin", "cache_aware", "power_of_two", "manual"] = "manual"
    """sglang-router load-balancing policy. 'manual' keeps every request that carries the same
    routing key (x-smg-routing-key: one per agent trajectory) on one engine, so each turn finds
    the previous turns in that engine's prefix cache instead of re-prefilling the whole context."""
    assignment_mode: Literal["random", "min_load", "min_group"] = "min_load"
    """With policy 'manual': where a new routing key goes (sglang-router --assignment-mode):
    'min_load' = the engine with the fewest requests in flight."""
    startup_timeout_s: float = Field(60.0, gt=0)
    """How long the router may take to come up and see every engine."""
    health_check_interval_s: int = Field(5, ge=1)
    """sglang-router --health-check-interval-secs."""
