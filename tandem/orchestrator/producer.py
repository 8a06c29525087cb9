"""The rollout producer: groups stream from the engines into a buffer the trainer draws from.

A group (one prompt, G samples) is not owned by a training step. It is *admitted* whenever
there is room, and each step takes the first `prompts_per_step` finished groups that are fresh
enough, so the slowest trajectory no longer sets the step time (AReaL, PipelineRL, prime-rl).

Admission (AReaL's rule). With B = prompts_per_step, S = rollout.staleness.max, v = the weight
version the engines serve and k = the next step to train (k*B groups already trained):

    running + finished-not-trained <= (v + S + 1 - k) * B  (+ the oversample slack, when > 0)

i.e. trained + buffered + running <= (v + S + 1) * B: a group admitted under version v can
still feed steps up to v + S, and no more groups run than those steps can use. In sync mode
(S = 0) that is B groups per step, admitted only once the step's own weights are served:
exactly on-policy. `rollout.oversample` adds ceil(B * oversample) - B groups of slack.

Staleness (`rollout.staleness.measured_by`). Step k trains a group only if k - its key version <= S:
- oldest_token: the key is the version of its oldest token (a trajectory may span versions
  under partial_rollout = continue; every token carries its own version and logprob, and the
  off-policy correction, trainer.loss.tis, works per token);
- admission: the key is the version served when the group was admitted (stricter: a group
  that waited in a queue through a sync counts as old even if all its tokens are new).
A finished group that fails the rule is dropped and counted, never trained. A running group
that can no longer make any step is cancelled at the take (counted as discarded): under
admission as soon as its admission is too old, under oldest_token once an answer it got is
(`GroupProgress`); sync mode cancels every leftover.

Which groups a step takes: fresh finished groups in admission order (the oldest first), so a
long trajectory is trained as soon as it finishes instead of losing its slot to short ones that
started later; that is the remedy for the length bias streaming otherwise has (see
stream_stats.length_bias). Requests carry a priority (`rollout.staleness.request_priority`): the
admission version, or the trajectory's age.

Dynamic sampling (`rollout.signal.dynamic_sampling`, DAPO). A group whose valid rewards are all
equal carries no GRPO signal: it is dropped as it finishes (never buffered), which frees its place
under the admission rule, so another prompt is admitted in its stead. At most
`max_refills_per_step` groups are dropped and replaced per step (counted from one take to the
next); past that bound the step trains on fewer groups: each further zero-variance group gives up
its slot (`forfeited`: admission leaves it empty and the take needs one group fewer), down to a
single group, whose slot takes the next group to finish whatever its rewards. A dropped group
counts as used: its prompt is not in flight at a checkpoint.

A rollout that raises (anything but RunFatal, which stops the run at once) fails its group: the
group is dropped and counted (`FailedGroup`, handed to the step that takes next), admission
replaces it, and a run whose groups keep failing, a step's worth in a row without one success,
stops with RolloutsFailing instead of spinning (tandem.orchestrator.failures bounds the rest).

Reproducible runs (run.reproducible): each group samples with seeds derived from run.seed and
its admission order (REQUEST_SEED), a step takes exactly the B oldest-admitted groups (it waits
for them rather than taking whichever finished first), and the loop lets every running group
finish (`settled`) before a weight sync. A group admitted under version v therefore runs wholly
on v and is trained at step v + S: which version generated each sample is a function of the step.

In flight at a checkpoint: every group admitted and not yet trained (running, or finished and
buffered). A checkpoint records their prompts, in admission order, with the data cursor;
`--resume` regenerates those prompts first, under the checkpoint's weights, then continues the
cursor: no prompt is lost or trained twice (the buffered samples themselves are not saved).
"""

from __future__ import annotations

import asyncio
import math
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from tandem.errors import RunFatal
from tandem.orchestrator.signal import zero_variance
from tandem.orchestrator.stream_stats import StreamWindow
from tandem.rollout.scoring import reward_failed
from tandem.rollout import (GROUP_PROGRESS, REQUEST_PRIORITY, REQUEST_SEED, GroupProgress, PromptCursor,
                            RolloutAborted, RolloutContext, check_rollout_result, trajectory_seed)
from tandem.sample import Sample


@dataclass
class Group:
    seq: int
    """Admission order; a step's batch is sorted by it, so its sample order is deterministic."""
    row_pos: int
    """The prompt's position in the producer's rows (what a resume re-draws)."""
    samples: list[Sample]
    started: float
    finished: float
    admitted_version: int = 0

    @property
    def oldest_version(self) -> int:
        return min(s.weight_version for s in self.samples)


@dataclass
class Flight:
    """A group being generated."""
    row_pos: int
    admitted_version: int
    progress: GroupProgress = field(default_factory=GroupProgress)
    task: asyncio.Task | None = None


@dataclass
class FailedGroup:
    """A group whose rollout raised: dropped, counted, and its prompt kept for a stop checkpoint."""
    row_pos: int
    samples: int
    """The samples it would have produced (samples_per_prompt)."""
    error: str
    """'ExceptionType: message'."""
    traceback: str


class RolloutsFailing(RuntimeError):
    """A step's worth of groups failed in a row, with no group succeeding in between."""

    def __init__(self, failed: list[FailedGroup]):
        first = failed[0]
        super().__init__(f"{len(failed)} rollout group(s) in a row raised and none succeeded; the first: "
                         f"{first.error}")
        self.failed = failed


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
    stats: dict[str, float] = field(default_factory=dict)
    """Streaming metrics: token-version histogram, length bias, buffer and admission state."""
    failed_groups: list[FailedGroup] = field(default_factory=list)
    """Groups whose rollout raised since the previous step was taken."""


class RolloutProducer:
    def __init__(self, ctx: RolloutContext, rows: list[dict], cursor: PromptCursor, rollout_fn: Callable,
                 *, start_step: int, total_steps: int, staleness: int, engine_version: int,
                 in_flight_rows: list[int] | tuple[int, ...] = ()):
        cfg = ctx.cfg.rollout
        self.ctx, self.rows, self.cursor, self.rollout_fn = ctx, rows, cursor, rollout_fn
        self.prompts_per_step, self.group_size = cfg.prompts_per_step, cfg.samples_per_prompt
        self.slack = math.ceil(cfg.prompts_per_step * cfg.oversample) - cfg.prompts_per_step
        self.total_steps, self.staleness = total_steps, staleness
        lag = cfg.staleness
        self.staleness_by, self.priority_by, self.hold = lag.measured_by, lag.request_priority, lag.admission_hold
        self.version = engine_version
        self.reproducible = ctx.cfg.run.reproducible
        self.next_step = start_step
        """The step `take` serves next; next_step * B groups have been trained."""
        self._requeue = deque(in_flight_rows)
        self._cond = asyncio.Condition()
        self._running: dict[int, Flight] = {}
        self._buffer: list[Group] = []
        self._seq = 0
        self._window = StreamWindow()
        self._error: BaseException | None = None
        self._runner: asyncio.Task | None = None
        self._failed: list[FailedGroup] = []
        self._failed_in_a_row: list[FailedGroup] = []
        self.signal, self.max_new_tokens = cfg.signal, cfg.sampling.max_new_tokens
        self._filtered = 0
        """Zero-variance groups dropped since the last take (dynamic sampling)."""
        self._forfeited = 0
        """Of those, the ones past max_refills_per_step: slots the next step gives up."""
        self._filtered_reward = 0.0
        """The sum of their (equal, valid) rewards, one per group."""

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._runner = asyncio.create_task(self._run(), name="rollout-producer")

    async def stop(self) -> None:
        tasks = [f.task for f in self._running.values() if f.task] + ([self._runner] if self._runner else [])
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def set_version(self, version: int) -> None:
        async with self._cond:
            self.version = version
            self._cond.notify_all()

    # ------------------------------------------------------------------ admission
    def room(self) -> int:
        """How many more groups may be admitted now (the admission rule in the module docstring)."""
        ahead = min(self.version + self.staleness + 1, self.total_steps) - self.next_step
        if ahead <= 0 or (self.hold and self._tail_waiting()):
            return 0
        return ahead * self.prompts_per_step + self.slack - len(self._running) - len(self._buffer) - self._forfeited

    def _tail_waiting(self) -> bool:
        """A running group is at its last chance: too stale for any step after the next one."""
        return any(self.next_step + 1 - f.admitted_version > self.staleness for f in self._running.values())

    async def _run(self) -> None:
        while True:
            async with self._cond:
                await self._cond.wait_for(lambda: self.room() > 0 or self._error is not None)
                if self._error is not None:
                    return
                for _ in range(self.room()):
                    self._admit()

    def _admit(self) -> None:
        seq, self._seq = self._seq, self._seq + 1
        index = self._requeue.popleft() if self._requeue else self.cursor.next()
        flight = self._running[seq] = Flight(index, self.version)
        flight.task = asyncio.create_task(self._group(seq, self.rows[index]), name=f"group-{seq}")

    def _priority(self, seq: int) -> int:
        # SGLang serves larger priorities first: older admissions, or older trajectories.
        return -seq if self.priority_by == "age" else -self._running[seq].admitted_version

    async def _group(self, seq: int, row: dict) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        REQUEST_PRIORITY.set(self._priority(seq))  # this task's context only
        GROUP_PROGRESS.set(self._running[seq].progress)
        if self.reproducible:
            REQUEST_SEED.set(trajectory_seed(self.ctx.cfg.run.seed, seq))
        try:
            while True:
                try:
                    samples = check_rollout_result(await self.rollout_fn(self.ctx, row, self.group_size),
                                                   self.ctx.cfg.rollout.function)
                    break
                except RolloutAborted:
                    # Aborted by a weight update: regenerate the whole group, admitted anew under
                    # the version the engines now serve.
                    self._window.recycled += 1
                    regenerated = self._running[seq]
                    regenerated.admitted_version = max(self.version, self._engine_version())
                    regenerated.progress.oldest_version = None
        except asyncio.CancelledError:
            raise
        except Exception as err:
            if isinstance(err, RunFatal):  # the plug-in asks to stop the run
                await self._fail_run(err)
            else:
                await self._group_failed(seq, err)
            return
        except BaseException as err:  # surfaces in take(): stops the run loudly
            await self._fail_run(err)
            return
        async with self._cond:
            flight = self._running.pop(seq, None)
            if flight is None:  # cancelled by take() meanwhile
                return
            self._failed_in_a_row = []
            for i, s in enumerate(samples):
                s.group_id, s.prompt_index = seq, int(row.get("_index", flight.row_pos))
                s.metadata.setdefault("sample_in_group", i)
            group = Group(seq, flight.row_pos, samples, started, loop.time(), flight.admitted_version)
            if not self._filtered_out(samples):
                self._buffer.append(group)
                self._window.finished(group)
            self._cond.notify_all()

    def _filtered_out(self, samples: list[Sample]) -> bool:
        """Dynamic sampling: drop a zero-variance group (module docstring), replaced while the step has
        refills left, else giving up its slot; the last slot keeps whatever group comes."""
        if not self.signal.dynamic_sampling or not zero_variance(samples, self.signal, self.max_new_tokens):
            return False
        if self._filtered >= self.signal.max_refills_per_step:
            if self._forfeited >= self.prompts_per_step - 1:
                return False
            self._forfeited += 1
        self._filtered += 1
        self._filtered_reward += next(s.reward for s in samples if not reward_failed(s))
        return True

    async def _fail_run(self, err: BaseException) -> None:
        async with self._cond:
            self._error = err
            self._cond.notify_all()

    async def _group_failed(self, seq: int, err: Exception) -> None:
        """Drop the group and count it; a step's worth failing in a row stops the run."""
        async with self._cond:
            flight = self._running.pop(seq, None)
            if flight is None:  # cancelled by take() meanwhile
                return
            failed = FailedGroup(flight.row_pos, self.group_size, f"{type(err).__name__}: {err}",
                                 "".join(traceback.format_exception(err)))
            self._failed.append(failed)
            self._failed_in_a_row.append(failed)
            if len(self._failed_in_a_row) >= self.prompts_per_step and self._error is None:
                self._error = RolloutsFailing(list(self._failed_in_a_row))
            self._cond.notify_all()

    def _engine_version(self) -> int:
        return int(getattr(self.ctx.engine, "weight_version", self.version) or 0)

    # ------------------------------------------------------------------ taking
    def key_version(self, group: Group) -> int:
        return group.admitted_version if self.staleness_by == "admission" else group.oldest_version

    def fresh(self, step: int, group: Group) -> bool:
        return step - self.key_version(group) <= self.staleness

    def _doomed(self, flight: Flight, next_step: int) -> bool:
        """A running group no step from `next_step` on may train: cancel it instead of finishing it.
        Sync mode cancels every leftover (they ran on this step's weights). Under oldest_token the
        key is the oldest answer the group got so far (GroupProgress): a group that has no answer
        yet may still produce only newer tokens, so it runs on."""
        if self.staleness == 0:
            return True
        key = flight.admitted_version if self.staleness_by == "admission" else flight.progress.oldest_version
        return key is not None and next_step - key > self.staleness

    async def take(self, step: int) -> StepBatch:
        """Wait for `prompts_per_step` fresh finished groups; return the oldest-admitted ones."""
        dropped = 0
        async with self._cond:
            while True:
                if isinstance(self._error, RolloutsFailing):
                    raise self._error
                if self._error is not None:
                    raise RuntimeError(f"rollout failed: {self._error!r}") from self._error
                stale = [g for g in self._buffer if not self.fresh(step, g)]
                for g in stale:  # the bound holds per sample: drop, and let admission replace it
                    self._buffer.remove(g)
                    dropped += len(g.samples)
                if stale:
                    self._cond.notify_all()
                need = self.prompts_per_step - self._forfeited  # dynamic sampling may forfeit slots
                if self._ready(need):
                    break
                await self._cond.wait()
            self._buffer.sort(key=lambda g: g.seq)
            taken, self._buffer = self._buffer[:need], self._buffer[need:]
            self.next_step = step + 1
            doomed = [self._running.pop(seq) for seq, f in list(self._running.items()) if self._doomed(f, self.next_step)]
            for flight in doomed:
                self._window.cancelled(flight.progress, self.group_size)
            cancelled = [flight.task for flight in doomed]
            batch = self._batch(step, taken, dropped, len(cancelled))  # this window only, under the lock
            self._cond.notify_all()
        tasks = [t for t in cancelled if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        return batch

    def _ready(self, need: int) -> bool:
        """`need` groups (a step's worth) are buffered (reproducible: the oldest-admitted ones, none of
        which still runs)."""
        if len(self._buffer) < need:
            return False
        if not self.reproducible or not self._running:
            return True
        return sorted(g.seq for g in self._buffer)[need - 1] < min(self._running)

    async def settled(self) -> None:
        """Return once no group is running (reproducible runs wait for it before a weight sync)."""
        async with self._cond:
            await self._cond.wait_for(lambda: not self._running or self._error is not None)

    def _batch(self, step: int, taken: list[Group], dropped: int, cancelled: int) -> StepBatch:
        samples = [s for g in taken for s in g.samples]
        window = self._window
        self._window = StreamWindow()
        stats = window.stats(step, samples, self.staleness,
                             buffered=len(self._buffer), running=len(self._running),
                             admission_lags=[step - g.admitted_version for g in taken])
        stats.update(groups_filtered=self._filtered, groups_forfeited=self._forfeited,
                     groups_filtered_fraction=self._filtered / (self._filtered + len(taken)),
                     filtered_reward_mean=self._filtered_reward / self._filtered if self._filtered else 0.0)
        self._filtered = self._forfeited = 0
        self._filtered_reward = 0.0
        return StepBatch(
            step=step, samples=samples,
            rollout_time=max(g.finished for g in taken) - min(g.started for g in taken),
            dropped_stale=dropped, recycled=window.recycled, discarded=cancelled,
            longest_group_s=max(g.finished - g.started for g in taken), groups=taken, stats=stats,
            failed_groups=self.take_failed())

    def take_failed(self) -> list[FailedGroup]:
        """The groups that failed since the last call (each is handed out once)."""
        failed, self._failed = self._failed, []
        return failed

    # ------------------------------------------------------------------ checkpoints
    def checkpoint_state(self) -> dict:
        """The data position a resume restarts from: the cursor after every draw so far, and the
        prompts in flight (admitted, not trained), oldest first, to regenerate before it."""
        in_flight = sorted([(seq, f.row_pos) for seq, f in self._running.items()]
                           + [(g.seq, g.row_pos) for g in self._buffer])
        return {"cursor": self.cursor.state(), "in_flight_rows": list(self._requeue) + [i for _, i in in_flight]}
