"""[engine.autoscale]: an inference fleet that grows and shrinks with demand during a run (off by default).

Kept apart from tandem.config.sections (which nests it under [engine]) because the policy,
provider and hysteresis keys are a small world of their own; the rules tying them to the rest
of the config (engine.count within [min, max], supported backends) are validators in
tandem.config.schema.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from tandem.config.base import Section, rule_broken


class AutoscaleConfig(Section):
    enabled: bool = False
    """Let the fleet change size during the run; engine.count is the size it starts at."""
    min: int = Field(1, ge=1)
    """Fewest engines the fleet shrinks to."""
    max: int = Field(4, ge=1)
    """Most engines the fleet grows to (on a GPU node: one free GPU each)."""
    target: Literal["trainer_idle", "step_time"] = "trainer_idle"
    """What the policy holds: trainer_idle = the trainer's idle ratio at or below target_idle_ratio (the engines keep the trainer fed); step_time = the step time at or below target_step_time_s."""
    target_idle_ratio: float = Field(0.15, ge=0.0, lt=1.0)
    """target = trainer_idle: the trainer may wait on rollouts for this fraction of a step."""
    target_step_time_s: float = Field(60.0, gt=0)
    """target = step_time: the step time the fleet should hold."""
    hysteresis: float = Field(0.1, ge=0.0, lt=1.0)
    """Dead band around the target: scale up only above target + hysteresis (idle ratio, or a fraction of the step time), down only when the fleet one smaller is predicted to stay below target - hysteresis."""
    cooldown_steps: int = Field(3, ge=0)
    """Steps after a change before the next decision: a new or removed engine needs a few steps to show in the measurements."""
    max_change: int = Field(1, ge=1)
    """Most engines added or removed by one decision."""
    window_steps: int = Field(3, ge=1)
    """Steps the measured signals are averaged over (the model is fitted to these)."""
    latency_profile: str = ""
    """An engine profile (profiles/engine/*.toml) describing one engine of this run: the policy then predicts a smaller fleet's rollout time with its latency model (one decode step's time at the measured batch, spread over fewer engines). Empty: engine.sim.profile when engine.backend = 'sim', else none (rollout work split evenly)."""
    policy: str = ""
    """Your own policy, 'module:Class' or 'file.py:Class' (tandem.autoscale.Policy: built with this section, decide(signals) -> Decision). Empty: the built-in target policy."""
    provider: Literal["node", "command"] = "node"
    """Who starts and stops engines. node: engine processes on this machine (a free GPU each, or the CPU). command: `command` runs once per engine (e.g. a SkyPilot launch) and reports its URL."""
    command: str = ""
    """provider = command: a shell command per new engine; {name} is replaced by the engine's name. It prints the engine's base URL on a line `TANDEM_ENGINE_URL=http://...` and may keep running (the engine lives as long as it does) or exit 0."""
    stop_command: str = ""
    """provider = command: a shell command that stops an engine ({name}, {url} replaced); empty: the start command's process is terminated."""
    ready_timeout_s: float = Field(600.0, gt=0)
    """How long a new engine may take to report its URL and answer /health."""
    drain_timeout_s: float = Field(120.0, gt=0)
    """How long a leaving engine may take to finish the requests it holds; what is left is retried elsewhere."""

    @model_validator(mode="after")
    def _min_at_most_max(self) -> AutoscaleConfig:
        if self.min > self.max:
            raise rule_broken(f"engine.autoscale.min = {self.min} is above engine.autoscale.max = {self.max}")
        if self.provider == "command" and self.enabled and not self.command:
            raise rule_broken("engine.autoscale.provider = 'command' needs engine.autoscale.command")
        return self
