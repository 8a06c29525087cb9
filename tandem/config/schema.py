"""The root of the config tree: `TandemConfig`, which config.toml maps onto 1:1.

Its fields are the sections (tandem.config.sections, rollout_sections, engine_sections,
trainer_sections, environment_section); [engine] and [trainer] are by backend; the
rules that tie keys of different sections together are model validators here, each named
after its rule.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from pydantic import model_validator

from tandem.lora import MEGATRON_LORA_TARGETS
from tandem.config.base import rule_broken
from tandem.config.engine_sections import EmbeddedEngineConfig, EngineConfig, RouterConfig
from tandem.config.environment_section import EnvironmentConfig
from tandem.config.eval_section import AlarmsConfig, EvalConfig
from tandem.config.rollout_sections import DataConfig, RolloutConfig, StalenessConfig
from tandem.config.sections import (CheckpointConfig, FaultsConfig, LoggingConfig, ModelConfig, RunConfig, Section,
                                    SyncConfig, is_remote_url)
from tandem.config.trainer_sections import TorchTrainerConfig, TrainerConfig


class _HasStaleness(Protocol):
    @property
    def staleness(self) -> StalenessConfig: ...


class DerivedSettings:
    """Settings derived from several keys; TandemConfig and each child's view (config.views) have them."""

    if TYPE_CHECKING:  # the fields these read, declared by each model that mixes this in
        run: RunConfig
        rollout: _HasStaleness

    @property
    def effective_staleness(self) -> int:
        """Sync mode is the same loop with a staleness bound of 0."""
        return 0 if self.run.mode == "sync" else self.rollout.staleness.max

    @property
    def colocated(self) -> bool:
        """The engines and the trainer take turns on the same devices (run.colocate resolved to true)."""
        return self.run.colocate is True


class TandemConfig(DerivedSettings, Section):
    run: RunConfig = RunConfig()
    """Run-wide settings."""
    model: ModelConfig = ModelConfig()
    """The policy model."""
    engine: EngineConfig = EmbeddedEngineConfig()
    """Inference engines: the keys every backend reads, and [engine.<backend>] for engine.backend's own."""
    router: RouterConfig = RouterConfig()
    """sglang-router in front of the engines."""
    data: DataConfig = DataConfig()
    """The prompts a run draws from."""
    rollout: RolloutConfig = RolloutConfig()
    """Rollout generation: plug-ins, batch shape, sampling, the client and staleness."""
    environment: EnvironmentConfig = EnvironmentConfig()
    """A multi-turn environment (environment.name), its arguments and its episode limits."""
    trainer: TrainerConfig = TorchTrainerConfig()
    """The trainer and its loss: the keys every backend reads, and [trainer.<backend>] for trainer.backend's own."""
    sync: SyncConfig = SyncConfig()
    """Weight sync through local disk."""
    logging: LoggingConfig = LoggingConfig()
    """Metrics and the live view."""
    checkpoint: CheckpointConfig = CheckpointConfig()
    """Checkpoints for `--resume`."""
    faults: FaultsConfig = FaultsConfig()
    """Engine crash recovery and the stall watchdog."""
    eval: EvalConfig = EvalConfig()
    """Held-out evaluation, pinned to weight versions (eval.jsonl, eval/* metrics, `tandem eval`)."""
    alarms: AlarmsConfig = AlarmsConfig()
    """Thresholds of the learning alarms (alarm/* metrics; run.stop_on_alarm stops the run on one)."""

    @model_validator(mode="after")
    def _weights_published_within_staleness_bound(self) -> TandemConfig:
        # Engines can only serve versions that were published; a staleness bound tighter
        # than the publish interval would make the rollout wait forever.
        bound = self.effective_staleness
        if self.sync.every_k_steps - 1 > bound:
            raise rule_broken(f"sync.every_k_steps is {self.sync.every_k_steps}, but with staleness bound {bound} "
                              f"(run.mode={self.run.mode}) weights must be synced at least every "
                              f"{bound + 1} step(s)")
        return self

    @model_validator(mode="after")
    def _reproducible_runs_take_what_they_admit(self) -> TandemConfig:
        # Over-sampled groups are raced: which ones a step trains would depend on timing.
        if self.run.reproducible and self.rollout.oversample != 1.0:
            raise rule_broken(f"run.reproducible = true with rollout.oversample = {self.rollout.oversample}: a step "
                              "then trains the groups that finish first, which depends on timing; set "
                              "rollout.oversample = 1 (or run.reproducible = false)")
        return self

    @model_validator(mode="after")
    def _weights_reach_the_engines(self) -> TandemConfig:
        # Engines load a version from a path they can open; only a weight agent beside an
        # engine turns an object-store URL into one, and only external engines have agents.
        url, by = self.sync.url, self.sync.reload_by
        remote = is_remote_url(url)
        if remote and by == "orchestrator":
            raise rule_broken(f"sync.url = {url!r} is an object store, which engines cannot load from: "
                              f"set sync.reload_by = 'agent' (or 'auto') and run a weight agent per engine host")
        if (by == "agent" or remote) and self.engine.backend != "external":
            raise rule_broken(f"weights loaded by weight agents (sync.url = {url!r}, sync.reload_by = {by!r}) need "
                              f"engine.backend = 'external' (engines started with their agents on their own hosts); "
                              f"engine.backend is {self.engine.backend!r}")
        return self

    @model_validator(mode="after")
    def _lora_runs_where_it_is_built(self) -> TandemConfig:
        # Refused, never silently ignored: each of these would train or ship whole weights.
        if not self.trainer.lora.enabled:
            return self
        if self.trainer.backend == "megatron":
            unsupported = [t for t in self.trainer.lora.target_modules if t not in MEGATRON_LORA_TARGETS]
            if unsupported:
                raise rule_broken(f"trainer.lora.target_modules {unsupported} have no Megatron layer; with "
                                  f"trainer.backend = 'megatron' LoRA targets {', '.join(MEGATRON_LORA_TARGETS)}")
            if self.trainer.lora.dropout > 0:
                raise rule_broken("trainer.lora.dropout > 0 with trainer.backend = 'megatron': the Megatron adapters "
                                  "apply no dropout; set trainer.lora.dropout = 0 or use trainer.backend = 'torch'")
        if self.trainer.backend == "sim":
            raise rule_broken("trainer.lora.rank > 0 with trainer.backend = 'sim': the sim trainer publishes "
                              "stand-in weights, not adapters; use trainer.backend = 'torch'")
        if self.sync.encoding == "delta":
            raise rule_broken("trainer.lora.rank > 0 with sync.encoding = 'delta': each version is an adapter of a "
                              "few MB, published whole; set sync.encoding = 'full'")
        return self

    @model_validator(mode="after")
    def _an_environment_owns_its_rollout_and_reward(self) -> TandemConfig:
        # An environment's episodes run on tandem.env's loop and are scored by its reward();
        # a rollout function or reward plug-in named beside it would silently go unused.
        if not self.environment.name:
            return self
        defaults = type(self.rollout)()
        for key in ("function", "reward"):
            if getattr(self.rollout, key) != getattr(defaults, key):
                raise rule_broken(f"rollout.{key} = {getattr(self.rollout, key)!r} with environment.name = "
                                  f"{self.environment.name!r}: an environment runs on the shared agent loop and "
                                  f"its reward() scores each episode; remove rollout.{key}")
        return self

    @model_validator(mode="after")
    def _a_harness_owns_its_rollout(self) -> TandemConfig:
        # A harness is the rollout: a rollout function or environment named beside it would go unused.
        r = self.rollout
        if not (r.harness or r.harness_command):
            return self
        if r.harness and r.harness_command:
            raise rule_broken(f"rollout.harness = {r.harness!r} and rollout.harness_command = {r.harness_command!r}: "
                              f"a harness runs in process or as a program; keep one")
        key = "rollout.harness" if r.harness else "rollout.harness_command"
        if self.environment.name:
            raise rule_broken(f"{key} with environment.name = {self.environment.name!r}: the harness is the agent; "
                              f"remove environment.name")
        if r.function != type(r)().function:
            raise rule_broken(f"rollout.function = {r.function!r} with {key}: the harness is the rollout; "
                              f"remove rollout.function")
        return self

    @model_validator(mode="after")
    def _autoscaled_fleet_starts_inside_its_bounds(self) -> TandemConfig:
        scale = self.engine.autoscale
        if not scale.enabled:
            return self
        if not scale.min <= self.engine.count <= scale.max:
            raise rule_broken(f"engine.count = {self.engine.count} is the size an autoscaled fleet starts at: it must "
                              f"lie within engine.autoscale.min = {scale.min} and engine.autoscale.max = {scale.max}")
        if self.engine.backend == "external" and scale.provider != "command":
            raise rule_broken("engine.autoscale with engine.backend = 'external': tandem starts no engines on other "
                              "hosts itself; set engine.autoscale.provider = 'command' (a command that starts one)")
        if scale.target == "trainer_idle" and self.effective_staleness == 0:
            raise rule_broken("engine.autoscale.target = 'trainer_idle' with run.mode = 'sync': in sync mode the "
                              "trainer waits for every rollout by design; set engine.autoscale.target = 'step_time'")
        if self.trainer.lora.enabled:
            raise rule_broken("engine.autoscale with trainer.lora: a joining engine would need every adapter still in "
                              "use loaded first, which is not built; turn one of them off")
        return self

    @model_validator(mode="after")
    def _colocation_is_sync_and_local(self) -> TandemConfig:
        # Colocated engines and trainer take turns on one device: in async mode both would hold
        # their memory at once, which is exactly what colocation cannot afford.
        if self.run.colocate is not True:
            return self
        if self.run.mode != "sync":
            raise rule_broken("run.colocate = true with run.mode = 'async': colocated engines and trainer take turns "
                              "on the same GPU (the engines release their memory while the trainer trains), so their "
                              "work cannot overlap; set run.mode = 'sync' (or run.colocate = false)")
        if self.engine.backend == "external":
            raise rule_broken("run.colocate = true with engine.backend = 'external': engines on other hosts share no "
                              "device with this trainer; set run.colocate = false")
        if self.engine.autoscale.enabled:
            raise rule_broken("run.colocate = true with engine.autoscale: a colocated fleet is sized to the trainer's "
                              "GPUs, not grown; turn one of them off")
        if self.engine.backend == "sglang" and self.engine.sglang.device == "cpu":
            raise rule_broken("run.colocate = true with engine.sglang.device = 'cpu': SGLang's memory saver and "
                              "/release_memory_occupation need CUDA; set run.colocate = false")
        return self

    @model_validator(mode="after")
    def _moe_runs_where_it_is_built(self) -> TandemConfig:
        # Refused by name rather than failing deep inside a backend: what MoE needs exists for the
        # torch and Megatron trainers and the embedded and SGLang engines only.
        tiny_moe = self.model.path == "tiny" and self.model.tiny.num_experts > 0
        if self.trainer.backend == "megatron":
            self._megatron_splits_the_experts(tiny_moe)
        if tiny_moe and self.trainer.lora.enabled:
            raise rule_broken("trainer.lora.rank > 0 with model.tiny.num_experts > 0: the experts' weights are 3D "
                              "parameters that neither peft nor the engines' LoRA layers wrap; "
                              "set trainer.lora.rank = 0")
        if not self.trainer.moe.wants_routing:
            return self
        key = "trainer.moe.routing_replay" if self.trainer.moe.routing_replay else "trainer.moe.record_routing"
        if self.trainer.backend not in ("torch", "megatron"):
            raise rule_broken(f"{key} = true with trainer.backend = {self.trainer.backend!r}: routing replay and "
                              f"agreement are built into the torch and megatron trainers; set trainer.backend")
        if self.model.path == "tiny" and not tiny_moe:
            raise rule_broken(f"{key} = true with a dense model: set model.tiny.num_experts > 0 (a Qwen3-MoE "
                              f"tiny model) or model.path to a mixture-of-experts model")
        if self.engine.backend == "sim":
            raise rule_broken(f"{key} = true with engine.backend = 'sim': the sim engine routes no tokens to "
                              f"experts; use engine.backend = 'embedded' or 'sglang'")
        return self

    def _megatron_splits_the_experts(self, tiny_moe: bool) -> None:
        """What the Megatron trainer needs of an MoE model that is known here (a tiny one); a checkpoint's own
        config is checked the same way when the trainer loads it (megatron_convert)."""
        mcfg = self.trainer.megatron
        if self.model.path == "tiny" and not tiny_moe and mcfg.expert_parallel > 1:
            raise rule_broken(f"trainer.megatron.expert_parallel = {mcfg.expert_parallel} with a dense model: expert "
                              "parallelism splits the experts of a mixture-of-experts model; set it to 1")
        if not tiny_moe:
            return
        if mcfg.tensor_parallel > 1:
            raise rule_broken(f"trainer.megatron.tensor_parallel = {mcfg.tensor_parallel} with a mixture-of-experts "
                              "model: megatron-core 0.16.1 trains MoE layers at TP > 1 only with sequence parallelism, "
                              "which tandem does not use; set tensor_parallel = 1 and split the experts with "
                              "trainer.megatron.expert_parallel")
        if self.model.tiny.num_experts % mcfg.expert_parallel:
            raise rule_broken(f"trainer.megatron.expert_parallel = {mcfg.expert_parallel} does not divide "
                              f"model.tiny.num_experts = {self.model.tiny.num_experts}")
