"""Sharing a CPU box between the engines and the trainer (run.cpu_split = "phase").

On a laptop the engines and the trainer are processes on the same cores. An equal, fixed share
leaves half the machine idle in sync mode: the engines wait while the trainer trains, and the
trainer waits while they generate. So:

- sync mode: the side that computes gets the machine. Engines start with the cores divided
  between them and the trainer with every core (tandem.placement); the two never compute at
  once. On a machine busy with other work, though, a torch step on every core waits at each
  parallel region for whichever of its threads the OS has parked (issue 49: 4.3-11.2 s per train
  step on every core against 0.54-0.76 s with the even share, load average 10-13). So the
  trainer's thread count is chosen by measurement (`ThreadChoice`): every core and the even
  share are each tried, the faster by smoothed seconds per step is kept, and the other is
  re-tried every PROBE_EVERY steps, since the load changes.
- async mode: both sides compute at once, so the cores are split between them by their
  measured demand, re-decided before each step. A side's demand is its core-seconds per step,
  smoothed over steps: the trainer's train time times its threads, the engines' rollout time
  times theirs. Splitting in that ratio lets both finish their overlapping work at about the
  same time. Each side keeps at least one thread, and the shares never add up to more than
  the machine: explicit pinning, no oversubscription.

The split is applied while the trainer is idle (just before it gets its batch), so the two
shares are never both raised at once. Thread counts are explicit torch thread counts: the
trainer's travels with its batch (tandem.handoff), each engine's is set with POST /set_cpu_threads.

Measured and rejected (bench/results/trl_compare_*.json, the closing note of issue 18): giving
the engines every core whenever the trainer is idle in async mode. The trainer's idle spans are
short and unpredictable (the producer may admit work mid-step), and the flips cost more than
they gave: 0.155 s against 0.091 s per step at the tiny size, 5.0 s against 3.0 s at 23M.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Awaitable, Callable

SMOOTHING = 0.5
"""Weight of the newest step in the demand averages."""
PROBE_EVERY = 20
"""Sync mode: steps between re-trials of the trainer's thread count that is not in use."""


@dataclass(frozen=True)
class Split:
    engine_threads: int
    """Torch threads of each engine."""
    trainer_threads: int


def split_by_demand(cores: int, engines: int, engine_demand: float | None, trainer_demand: float | None) -> Split:
    """The threads each side gets while both compute: cores in proportion to demand (core-seconds
    per step), at least one thread per engine and one for the trainer, never more than `cores` in
    all (unless there are more processes than cores: then one thread each)."""
    if cores <= engines:
        return Split(1, 1)
    if not engine_demand or not trainer_demand:
        engine_total = cores * engines // (engines + 1)  # no measurement yet: an even share per process
    else:
        engine_total = round(cores * engine_demand / (engine_demand + trainer_demand))
    engine_total = min(max(engine_total, engines), cores - 1)
    each = engine_total // engines
    return Split(each, cores - each * engines)


class ThreadChoice:
    """The trainer's thread count in sync mode: the candidate with the lowest smoothed seconds per
    step, each tried once first (the largest first) and the others re-tried every PROBE_EVERY
    steps. The first step's time is not counted: it carries one-time costs (allocation, warm-up)."""

    def __init__(self, candidates: list[int]):
        self.candidates = sorted(set(candidates), reverse=True)
        self.seconds: dict[int, float] = {}
        self.steps = 0

    def pick(self) -> int:
        untried = [c for c in self.candidates if c not in self.seconds]
        if untried:
            return untried[0]
        best = min(self.seconds, key=self.seconds.__getitem__)
        others = [c for c in self.candidates if c != best]
        if others and self.steps % PROBE_EVERY == 0:
            return others[(self.steps // PROBE_EVERY) % len(others)]
        return best

    def record(self, threads: int, seconds: float) -> None:
        self.steps += 1
        if self.steps > 1:
            old = self.seconds.get(threads)
            self.seconds[threads] = seconds if old is None else (1 - SMOOTHING) * old + SMOOTHING * seconds


class CpuShare:
    """The loop asks it for the trainer's threads before each step, and reports each step's times."""

    def __init__(self, cores: int, engines: int, overlapping: bool,
                 set_engine_threads: Callable[[int], Awaitable[None]], adapt: bool = True):
        """`adapt` False (run.reproducible): async mode keeps the even split, since a thread count
        that followed measured times would change the trainer's float reductions with the load."""
        self.cores, self.engines, self.overlapping, self.adapt = cores, engines, overlapping, adapt
        alone = Split(max(1, cores // engines), cores)
        self.split = split_by_demand(cores, engines, None, None) if overlapping else alone
        """In force now; in sync mode always each side alone on the machine."""
        self.engine_threads = alone.engine_threads
        """What the engines compute with (placement started them with their share alone)."""
        self._set_engines = set_engine_threads
        self.trainer_choice = ThreadChoice([cores, split_by_demand(cores, engines, None, None).trainer_threads]) \
            if adapt and not overlapping else None
        """Sync mode: the trainer's thread count, chosen by measured step time."""
        self.engine_demand: float | None = None
        self.trainer_demand: float | None = None

    async def training_starts(self) -> int:
        """The trainer is idle and about to get a batch: its thread count for the step (the
        engines are set to the matching share first)."""
        if self.overlapping and self.adapt:
            self.split = split_by_demand(self.cores, self.engines, self.engine_demand, self.trainer_demand)
        elif self.trainer_choice is not None:
            self.split = Split(self.split.engine_threads, self.trainer_choice.pick())
        if self.split.engine_threads != self.engine_threads:
            await self._set_engines(self.split.engine_threads)
            self.engine_threads = self.split.engine_threads
        return self.split.trainer_threads

    def metrics(self) -> dict[str, int]:
        """The step's thread counts, for metrics.jsonl."""
        return {"engine_cpu_threads": self.split.engine_threads, "trainer_cpu_threads": self.split.trainer_threads}

    def training_done(self, train_s: float, rollout_s: float) -> None:
        """Record one step's demands: core-seconds = seconds x the threads each side had."""
        def smooth(old: float | None, new: float) -> float:
            return new if old is None else (1 - SMOOTHING) * old + SMOOTHING * new
        if train_s > 0 and self.trainer_choice is not None:
            self.trainer_choice.record(self.split.trainer_threads, train_s)
        if train_s > 0:
            self.trainer_demand = smooth(self.trainer_demand, train_s * self.split.trainer_threads)
        if rollout_s > 0:
            self.engine_demand = smooth(self.engine_demand, rollout_s * self.split.engine_threads * self.engines)


class FixedShare:
    """run.cpu_split = "even", GPUs, or a simulated run: thread counts stay as placement set them."""

    async def training_starts(self) -> int | None:
        return None

    def metrics(self) -> dict[str, int]:
        return {}

    def training_done(self, train_s: float, rollout_s: float) -> None:
        return None


FIXED = FixedShare()
