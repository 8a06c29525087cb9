"""The rollout producer: groups in flight, gated by a staleness bound.

A group meant for training step s may start only once the engines serve a weight
version v >= s - S (S = rollout.max_staleness, 0 in sync mode). That single rule is the
difference between the modes: with S = 0 the rollout of step s waits for the weights of
step s (rollout, train, sync, alternate); with S = 1 it starts while the trainer is still
on step s - 1 (one-step-off async). The rule bounds how far the producer runs ahead, and
`take()` re-checks every sample (s - sample.weight_version <= S), so a sample that lags
more is dropped and counted, never trained on.

Straggler hooks: `rollout.oversample` starts more groups than a step needs and keeps the
first to finish (the rest are cancelled and counted); groups aborted by a weight update
(policy 'abort') are regenerated under the new weights ('recycled').
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Callable

from tandem.rollout import REQUEST_PRIORITY, PromptCursor, RolloutAborted, RolloutContext, check_rollout_result
from tandem.sample import Sample


@dataclass
class Group:
    seq: int
    """Launch order; batches are sorted by it so a step's sample order is deterministic."""
    row_index: int
    samples: list[Sample]
    started: float
    finished: float

    @property
    def oldest_version(self) -> int:
        return min(s.weight_version for s in self.samples)


@dataclass
class StepBatch:
    step: int
    samples: list[Sample]
    rollout_time: float
    dropped_stale: int
    recycled: int
    discarded: int
    longest_group_s: float
    groups: list[Group] = field(default_factory=list)


class RolloutProducer:
    def __init__(self, ctx: RolloutContext, rows: list[dict], cursor: PromptCursor, rollout_fn: Callable,
                 *, start_step: int, total_steps: int, staleness: int, engine_version: int):
        cfg = ctx.cfg.rollout
        self.ctx, self.rows, self.cursor, self.rollout_fn = ctx, rows, cursor, rollout_fn
        self.prompts_per_step, self.group_size = cfg.prompts_per_step, cfg.samples_per_prompt
        self.launch_per_step = math.ceil(cfg.prompts_per_step * cfg.oversample)
        self.start_step, self.total_steps, self.staleness = start_step, total_steps, staleness
        self.version = engine_version
        self._cond = asyncio.Condition()
        self._done: dict[int, list[Group]] = defaultdict(list)
        self._tasks: dict[int, dict[int, asyncio.Task]] = defaultdict(dict)
        self._first_launch: dict[int, float] = {}
        self._cursor_at: dict[int, dict] = {}
        self._seq = 0
        self._recycled: dict[int, int] = defaultdict(int)
        self._error: BaseException | None = None
        self._runner: asyncio.Task | None = None

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="rollout-producer")

    async def stop(self) -> None:
        tasks = [t for per_step in self._tasks.values() for t in per_step.values()]
        if self._runner:
            tasks.append(self._runner)
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def set_version(self, version: int) -> None:
        async with self._cond:
            self.version = version
            self._cond.notify_all()

    # ------------------------------------------------------------------ launching
    async def _admitted(self, step: int) -> None:
        async with self._cond:
            await self._cond.wait_for(lambda: self.version >= step - self.staleness or self._error is not None)

    async def _run(self) -> None:
        for step in range(self.start_step, self.total_steps):
            await self._admitted(step)
            self._cursor_at[step] = self.cursor.state()
            self._first_launch.setdefault(step, time.monotonic())
            for _ in range(self.launch_per_step):
                self._launch(step)

    def _launch(self, step: int) -> None:
        seq, self._seq = self._seq, self._seq + 1
        row = self.rows[self.cursor.next()]
        self._tasks[step][seq] = asyncio.create_task(self._group(step, seq, row), name=f"group-{step}-{seq}")

    async def _group(self, step: int, seq: int, row: dict) -> None:
        started = time.monotonic()
        REQUEST_PRIORITY.set(-step)  # this task's context only: older steps are served first
        try:
            while True:
                try:
                    samples = check_rollout_result(await self.rollout_fn(self.ctx, row, self.group_size),
                                                   self.ctx.cfg.rollout.function)
                    break
                except RolloutAborted:
                    # Aborted by a weight update: regenerate the whole group under new weights.
                    self._recycled[step] += 1
                    await self._admitted(step)
        except asyncio.CancelledError:
            raise
        except BaseException as err:  # surfaces in take(): a broken rollout stops the run loudly
            async with self._cond:
                self._error = err
                self._cond.notify_all()
            return
        for i, s in enumerate(samples):
            s.group_id, s.prompt_index = seq, int(row.get("_index", -1))
            s.metadata.setdefault("sample_in_group", i)
        async with self._cond:
            self._done[step].append(Group(seq, int(row.get("_index", -1)), samples, started, time.monotonic()))
            self._tasks[step].pop(seq, None)
            self._cond.notify_all()

    def cursor_state_for(self, step: int) -> dict:
        """The data cursor as it stood before `step` drew its prompts (what a resume restarts from)."""
        return self._cursor_at.get(step) or self.cursor.state()

    # ------------------------------------------------------------------ taking
    def _fresh(self, step: int, group: Group) -> bool:
        return step - group.oldest_version <= self.staleness

    async def take(self, step: int) -> StepBatch:
        """Wait for `prompts_per_step` fresh groups of `step`; return them in launch order."""
        dropped = 0
        async with self._cond:
            while True:
                if self._error is not None:
                    raise RuntimeError(f"rollout failed: {self._error!r}") from self._error
                stale = [g for g in self._done[step] if not self._fresh(step, g)]
                for g in stale:  # enforce the bound per sample; replace what we drop
                    self._done[step].remove(g)
                    dropped += len(g.samples)
                    self._launch(step)
                if len(self._done[step]) >= self.prompts_per_step:
                    break
                await self._cond.wait()
            taken = self._done[step][: self.prompts_per_step]
            extra = self._done.pop(step)[self.prompts_per_step:]
            pending = list(self._tasks.pop(step, {}).values())
        for t in pending:  # over-sampled groups that lost the race
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        taken.sort(key=lambda g: g.seq)
        start = self._first_launch.pop(step, taken[0].started)
        self._cursor_at.pop(step - 1, None)
        return StepBatch(
            step=step,
            samples=[s for g in taken for s in g.samples],
            rollout_time=max(g.finished for g in taken) - start,
            dropped_stale=dropped,
            recycled=self._recycled.pop(step, 0),
            discarded=len(extra) + len(pending),
            longest_group_s=max(g.finished - g.started for g in taken),
            groups=taken,
        )
