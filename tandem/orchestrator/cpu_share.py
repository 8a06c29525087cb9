"""Sharing a CPU box between the engines and the trainer (run.cpu_split = "phase").

On a laptop the engines and the trainer are processes on the same cores. An equal, fixed share
leaves half the machine idle in sync mode: the engines wait while the trainer trains, and the
trainer waits while they generate. So:

- sync mode: the side that computes gets the machine. Engines start with the cores divided
  between them and the trainer with every core (tandem.placement); the two never compute at
  once, so nothing changes at run time.
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


class CpuShare:
    """The loop asks it for the trainer's threads before each step, and reports each step's times."""

    def __init__(self, cores: int, engines: int, overlapping: bool,
                 set_engine_threads: Callable[[int], Awaitable[None]]):
        self.cores, self.engines, self.overlapping = cores, engines, overlapping
        alone = Split(max(1, cores // engines), cores)
        self.split = split_by_demand(cores, engines, None, None) if overlapping else alone
        """In force now; in sync mode always each side alone on the machine."""
        self.engine_threads = alone.engine_threads
        """What the engines compute with (placement started them with their share alone)."""
        self._set_engines = set_engine_threads
        self.engine_demand: float | None = None
        self.trainer_demand: float | None = None

    async def training_starts(self) -> int:
        """The trainer is idle and about to get a batch: its thread count for the step (the
        engines are set to the matching share first)."""
        if self.overlapping:
            self.split = split_by_demand(self.cores, self.engines, self.engine_demand, self.trainer_demand)
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
