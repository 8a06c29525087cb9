"""The root of the config tree: `TandemConfig`, which config.toml maps onto 1:1.

Its fields are the sections (tandem.config.sections, tandem.config.agent_sections); the
rules that tie keys of different sections together are model validators here, each named
after its rule.
"""

from __future__ import annotations

from pydantic import model_validator

from tandem.config.agent_sections import AgentConfig, SandboxConfig
from tandem.config.sections import (CheckpointConfig, EngineConfig, FaultsConfig, LoggingConfig, ModelConfig,
                                    RolloutConfig, RouterConfig, RunConfig, Section, SyncConfig, TrainerConfig,
                                    rule_broken)


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
    def _weights_published_within_staleness_bound(self) -> TandemConfig:
        # Engines can only serve versions that were published; a staleness bound tighter
        # than the publish interval would make the rollout wait forever.
        bound = self.effective_staleness
        if self.sync.every_k_steps - 1 > bound:
            raise rule_broken(f"sync.every_k_steps is {self.sync.every_k_steps}, but with staleness bound {bound} "
                              f"(run.mode={self.run.mode}) weights must be synced at least every "
                              f"{bound + 1} step(s)")
        return self

    @property
    def effective_staleness(self) -> int:
        """Sync mode is the same loop with a staleness bound of 0."""
        return 0 if self.run.mode == "sync" else self.rollout.max_staleness
