"""The autoscaling policy: how many engines the next steps need, from what the run measured.

Each step the controller hands the policy one `Signals` (the step's times, the engines' queues
and KV use); the policy answers one `Decision` (the engine count and why). The built-in
`TargetPolicy` holds the target of [engine.autoscale] with a model of the step fitted to the
run so far:

- work:      engine-seconds of rollout per step = rollout_time x engines (averaged over the
             last `window_steps` steps), split evenly over N engines;
- straggler: the longest group's own time, which no number of engines shortens (a group runs
             on one engine);
- train:     the trainer's turn (train + publish + reload).

    rollout(N) = max(work / N, straggler)
    step(N)    = max(train, rollout(N))        async (rollout overlaps training)
               = rollout(N) + train            sync
    idle(N)    = (step(N) - train) / step(N)   the share of a step the trainer waits

rollout(N) comes, in order of trust, from:
1. a measurement: the run held N engines before (SETTLED_STEPS in a row) at about today's demand
   (model tokens per step within 0.8-1.25x); scaled to today's tokens. It knows what no model
   does, e.g. that latency-bound rollouts (tools, a long tail) barely slow down on fewer engines;
2. for a smaller fleet, the sim's latency model (engine.autoscale.latency_profile, or the sim
   engines' profile): the measured rollout time times how much longer one decode step takes
   when the step's measured batch (requests in flight and their KV, time-averaged by the rollout
   client) is spread over N engines instead of today's;
3. the throughput model above. Sizing up always uses it, for the next step's work: the last
   step's plus the window's rising trend, without the straggler floor (see `decide`).

The measured value is taken over the window's steps on the current fleet size (time-weighted:
async steps alternate long and short). The policy scales up when it is past the target by more
than the hysteresis, to the smallest N predicted to meet the target (at most max_change more);
down when a smaller fleet is predicted to stay inside the target by the hysteresis and no queue
says otherwise (more requests waiting than running, or KV nearly full). After every change it
waits cooldown_steps, so a fleet never flips back before the measurements show what the change did.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol

SETTLED_STEPS = 3
"""A step counts as a measurement of its fleet size once the size has held this many steps in a
row: until then some of its groups started on the old fleet (async rollouts run up to
max_staleness steps ahead, and sticky sessions keep them on their engine)."""

KV_FULL = 0.9
"""KV use at or above which an engine is about to retract requests: never scale down then."""


@dataclass(frozen=True)
class Signals:
    step: int
    engines: int
    step_time: float
    rollout_time: float
    train_time: float
    """The trainer's whole turn: train + publish + reload."""
    trainer_idle_ratio: float
    longest_group_s: float
    waiting: int = 0
    """Requests waiting in the engines' queues (summed), at the end of the step."""
    running: int = 0
    kv_usage: float = 0.0
    """Highest KV use of any engine (0..1)."""
    mode: str = "async"
    tokens: float = 0.0
    """Model tokens the step's samples generated: the demand its rollouts put on the engines."""
    requests_mean: float = 0.0
    """Requests in flight on the engines, averaged over the step (all engines together)."""
    context_tokens_mean: float = 0.0
    """Their context tokens (prompt + half the output), averaged over the step."""


@dataclass(frozen=True)
class Decision:
    engines: int
    reason: str
    predicted_step_s: dict[int, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


class Policy(Protocol):
    """A user's own policy: `engine.autoscale.policy = "module:Class"`, built with the section."""

    def decide(self, signals: Signals) -> Decision: ...


@dataclass
class StepModel:
    """The step as a function of the engine count, fitted to the last `window` steps."""

    window: int
    history: deque = field(default_factory=deque)

    memory: list = field(default_factory=list)
    """The run's settled steps (SETTLED_STEPS in a row on one fleet size): what each size measured, at
    what demand."""

    recent_sizes: deque = field(default_factory=lambda: deque(maxlen=SETTLED_STEPS))
    decode_step_s: Callable[[float, float], float] | None = None
    """One engine's decode step time at (batch, KV tokens): the sim's latency model, or None."""

    def observe(self, s: Signals) -> None:
        self.history.append(s)
        while len(self.history) > self.window:
            self.history.popleft()
        self.recent_sizes.append(s.engines)
        if len(self.recent_sizes) == SETTLED_STEPS and len(set(self.recent_sizes)) == 1:
            self.memory.append(s)

    def remembered_rollout(self, n: int) -> float | None:
        """The rollout time a fleet of `n` measured earlier in the run at about today's demand (model
        tokens per step within 0.8-1.25x of the window's mean), scaled to it; None if it never did.
        Better than work / n where rollouts are bound by latency (tools, one long tail), not by
        engine throughput: there fewer engines cost little, which work / n cannot tell."""
        if not self.history:
            return None
        tokens = self._mean(s.tokens for s in self.history)
        seen = [s for s in self.memory if s.engines == n and s.tokens > 0 and 0.8 <= tokens / s.tokens <= 1.25]
        if not seen:
            return None
        return self._mean(s.rollout_time * tokens / s.tokens for s in seen[-self.window:])

    def _mean(self, values) -> float:
        values = list(values)
        return sum(values) / len(values)

    @property
    def work(self) -> float:
        return self._mean(s.rollout_time * s.engines for s in self.history)

    @property
    def straggler(self) -> float:
        return self._mean(s.longest_group_s for s in self.history)

    @property
    def train(self) -> float:
        return self._mean(s.train_time for s in self.history)

    @property
    def work_ahead(self) -> float:
        """The next step's work if demand keeps its trend: the last step's work plus the window's
        least-squares slope per step (never below the last: only a rise is projected)."""
        points = [(s.step, s.rollout_time * s.engines) for s in self.history]
        last = points[-1][1]
        if len(points) < 2:
            return last
        mean_x = sum(x for x, _ in points) / len(points)
        mean_y = sum(y for _, y in points) / len(points)
        spread = sum((x - mean_x) ** 2 for x, _ in points)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
        return last + max(0.0, slope)

    def latency_rollout(self, n: int) -> float | None:
        """The rollout time on `n` engines by the latency model: the window's rollout time on the
        current size, times how much longer one decode step takes when the measured batch and its
        KV are spread over `n` engines instead. Conservative for fewer engines: tool time, which does
        not slow down, is scaled too. None without a latency model or a measured batch."""
        size = self.history[-1].engines if self.history else 0
        now = [s for s in self.history if s.engines == size and s.requests_mean > 0]
        if self.decode_step_s is None or not now:
            return None
        batch, kv = self._mean(s.requests_mean for s in now), self._mean(s.context_tokens_mean for s in now)
        measured = self.decode_step_s(batch / size, kv / size)
        if not 0 < measured < math.inf:  # today's fleet is past the model's capacity: it cannot scale from there
            return None
        return self._mean(s.rollout_time for s in now) * self.decode_step_s(batch / n, kv / n) / measured

    def rollout(self, n: int, floor: bool = True, ahead: bool = False) -> float:
        """Measured at this size and demand earlier in the run; else, for a smaller fleet, the
        latency model; else the throughput model. Looking ahead (a rising demand) always uses the
        throughput model."""
        seen = None if ahead else self.remembered_rollout(n)
        if seen is None and not ahead and self.history and n < self.history[-1].engines:
            seen = self.latency_rollout(n)
        if seen is not None:
            return seen
        return max((self.work_ahead if ahead else self.work) / n, self.straggler if floor else 0.0)

    def step(self, n: int, mode: str, floor: bool = True, ahead: bool = False) -> float:
        rollout = self.rollout(n, floor, ahead)
        return max(self.train, rollout) if mode == "async" else rollout + self.train

    def idle(self, n: int, mode: str, floor: bool = True, ahead: bool = False) -> float:
        total = self.step(n, mode, floor, ahead)
        return (total - self.train) / total if total > 0 else 0.0


class TargetPolicy:
    """The built-in policy (see the module docstring)."""

    def __init__(self, cfg, decode_step_s: Callable[[float, float], float] | None = None) -> None:
        self.cfg = cfg
        self.model = StepModel(cfg.window_steps, decode_step_s=decode_step_s)
        self.last_change_step: int | None = None

    def _measured(self, s: Signals) -> float:
        """How far past the target the run is now, over the window's steps on this fleet size
        (async steps alternate long and short, so one step says little): > 0 over, < 0 under."""
        steps = [h for h in self.model.history if h.engines == s.engines] or [s]
        total = sum(h.step_time for h in steps)
        if self.cfg.target == "trainer_idle":
            waited = sum(h.trainer_idle_ratio * h.step_time for h in steps)
            return waited / total - self.cfg.target_idle_ratio
        return (total / len(steps) - self.cfg.target_step_time_s) / self.cfg.target_step_time_s

    def _predicted(self, n: int, mode: str, floor: bool = True, ahead: bool = False) -> float:
        if self.cfg.target == "trainer_idle":
            return self.model.idle(n, mode, floor, ahead) - self.cfg.target_idle_ratio
        return (self.model.step(n, mode, floor, ahead) - self.cfg.target_step_time_s) / self.cfg.target_step_time_s

    def decide(self, s: Signals) -> Decision:
        cfg, n = self.cfg, s.engines
        self.model.observe(s)
        sizes = range(cfg.min, cfg.max + 1)
        # A size that cannot hold the measured batch (KV or running-request limit) is left out:
        # its step is unbounded, and autoscale.jsonl stays plain JSON.
        predicted = {k: round(t, 4) for k in sizes if math.isfinite(t := self.model.step(k, s.mode))}
        if self.last_change_step is not None and s.step - self.last_change_step <= cfg.cooldown_steps:
            return Decision(n, f"hold: cooling down after the change at step {self.last_change_step}", predicted)
        over = self._measured(s)
        if over > cfg.hysteresis and n < cfg.max:
            # Up: for the next step's work if demand keeps rising (an engine added now serves only the
            # groups admitted after it joins), and without the straggler floor: measured under load,
            # the longest group includes its queueing, which more engines do shorten. An optimistic
            # size is corrected by the next measurements; max_change bounds the jump.
            meets = [k for k in sizes if k > n and self._predicted(k, s.mode, floor=False, ahead=True) <= 0]
            goal = meets[0] if meets else cfg.max
            want = min(goal, n + cfg.max_change)
            return self._change(s, want, f"up to {want}: {self._describe()} is past the target by {over:+.2f} "
                                         f"(hysteresis {cfg.hysteresis}); "
                                         + (f"{goal} predicted to meet it" if meets else "no size meets it")
                                         + (f", at most {cfg.max_change} more per decision" if want < goal else ""),
                                predicted)
        if n > cfg.min and over <= 0:
            if s.waiting > s.running or s.kv_usage >= KV_FULL:
                return Decision(n, f"hold: within the target, but the queues are full ({s.waiting} request(s) wait, "
                                   f"{s.running} run, KV use {s.kv_usage:.0%})", predicted)
            fits = [k for k in sizes if k < n and self._predicted(k, s.mode) <= -cfg.hysteresis]
            if fits:
                want = max(fits[0], n - cfg.max_change)
                return self._change(s, want, f"down to {want}: {want} engine(s) predicted to stay inside the target by "
                                             f"{-self._predicted(want, s.mode):.2f} (hysteresis {cfg.hysteresis})",
                                    predicted)
        return Decision(n, f"hold: {self._describe()} ({over:+.2f} from the target)", predicted)

    def _change(self, s: Signals, want: int, reason: str, predicted: dict) -> Decision:
        self.last_change_step = s.step
        return Decision(want, reason, predicted)

    def _describe(self) -> str:
        what = "trainer idle" if self.cfg.target == "trainer_idle" else "step time"
        return f"{what} over the last {self.cfg.window_steps} step(s)"
