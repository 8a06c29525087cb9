"""A virtual-time model of SGLang's scheduler on one GPU (no I/O, no asyncio, no tokens).

The scheduler owns *when* things happen; the engine core (`tandem.lab.sim_engine`) owns token ids
and HTTP. Time is "model seconds" (what the GPU would take); the caller maps it to wall time.

What is modelled, and why it matters for sizing an RL fleet:

* **FIFO waiting queue + admission control** (with `priority_scheduling`, SGLang's
  --enable-priority-scheduling order: larger `priority` first, FIFO within a priority; no
  preemption of running requests). A waiting request is admitted only if its prompt
  plus reserved future tokens fit in the KV budget, as SGLang's PrefillAdder does: running
  requests reserve `min(max_new - generated, clip) * new_token_ratio`, the candidate reserves
  `min(max_new, clip)` in full. `new_token_ratio` decays from 0.7 to 0.098 over 600 decode
  steps and jumps back after a retraction. This is what makes a single engine queue deep
  (the reference run's #queue-req peaked at 122) when 184 agent rollouts with long contexts
  share one GPU.
* **Prefill has priority over decode** (SGLang runs a new prefill batch before the next decode
  step), chunked at `chunk_tokens` new tokens per forward.
* **Decode** advances the whole running batch one token per step; the step time comes from
  `LatencyModel`. Between events the batch is constant, so k steps are summed in closed form.
* **Retraction.** When decode would overflow the KV pool, the newest running request goes back
  to the head of the queue and loses its KV (it is re-prefilled later), like SGLang's
  retract_decode.
* **Prefix (radix) cache** at block granularity, with reference counts: cached blocks that no
  running request uses are evicted LRU when KV is needed. Multi-turn agent requests reuse the
  previous turn's context when they land on the same engine.
* **Weight reload** blocks the GPU for `reload_s` between two steps (atomic swap).
* **Busy time.** Every forward (prefill, decode, reload) is accounted, and each request gets
  its share of the time (`SimReq.work_s`), so benchmarks can compute the ideal fleet time.

The parts live in their own modules and are re-exported here: the request and phase records in
`tandem.lab.sim.sched_types`, the prefix cache in `tandem.lab.sim.prefix_cache`, the busy-time
accounting in `tandem.lab.sim.busy`.
"""

from __future__ import annotations

from collections import deque
from typing import Callable, Literal

from tandem.engine.queueing import enqueue
from tandem.lab.sim.busy import BusyAccounting, BusySpan
from tandem.lab.sim.latency import LatencyModel
from tandem.lab.sim.prefix_cache import PrefixCache
from tandem.lab.sim.profiles import CapacityParams
from tandem.lab.sim.sched_types import Phase, ReqState, SimReq

__all__ = ["BusySpan", "Phase", "PrefixCache", "ReqState", "SimReq", "SimScheduler"]


class SimScheduler(BusyAccounting):
    """One engine's scheduler in model time: queue, admission, prefill, decode, retraction, reload."""

    STREAM_STEPS = 4
    """Longest decode run while a streaming request runs (it gets its tokens at each run's end)."""
    RECHECK_STEPS = 64
    """With requests waiting, re-run admission at least every this many decode steps (the
    reserve ratio decays per step, so a blocked head-of-queue request may become admissible)."""

    def __init__(self, model: LatencyModel, capacity: CapacityParams, cache: PrefixCache | None = None,
                 priority_scheduling: bool = False):
        self.model = model
        self.priority_scheduling = priority_scheduling
        self.cap = capacity
        self.cache = cache or PrefixCache(64, enabled=False)
        self.now = 0.0
        self.waiting: deque[SimReq] = deque()
        self.running: list[SimReq] = []
        self.phase: Phase | None = None
        self.paused = False
        self._reload_queue: list[tuple[float, Callable[[], None] | None]] = []
        self.new_token_ratio = capacity.init_new_token_ratio
        self._ratio_decay = (capacity.init_new_token_ratio - capacity.min_new_token_ratio) / capacity.new_token_ratio_decay_steps
        self._private_kv = 0          # KV tokens of running/prefilling requests outside the cache
        self._init_busy()
        self.decode_steps = 0
        self.generated_tokens = 0
        self.prefill_token_count = 0
        self.cached_token_count = 0
        self.retractions = 0
        self.max_batch_seen = 0

    # ------------------------------------------------------------------ views
    @property
    def kv_used(self) -> int:
        """KV tokens in use: requests' private tokens plus every cached block."""
        return self._private_kv + self.cache.size_tokens

    @property
    def prefilling(self) -> list[SimReq]:
        return self.phase.batch if self.phase is not None and self.phase.kind == "prefill" else []

    def next_event_time(self) -> float | None:
        return None if self.phase is None else self.phase.end

    def progress(self, now: float) -> dict[SimReq, int]:
        """Tokens generated so far by each decoding request at `now`, without changing state."""
        ph = self.phase
        if ph is None or ph.kind != "decode" or now <= ph.start:
            return {}
        j = min(self.model.steps_within(now - ph.start, len(ph.batch), ph.kv0), ph.steps)
        return {r: r.done + j for r in ph.batch}

    # ------------------------------------------------------------------ client operations
    def submit(self, req: SimReq, now: float) -> list[SimReq]:
        """Queue a request (FIFO, or by priority); returns requests that finished while catching up to `now`."""
        finished = self.advance(now)
        req.state = "waiting"
        req.submitted_at = now
        enqueue(self.waiting, req, by_priority=self.priority_scheduling)
        finished += self._settle(now)
        finished += self._plan()
        return finished

    def abort(self, req: SimReq, now: float) -> list[SimReq]:
        """Abort one request wherever it is; its `done` tokens are final. Returns finished ones."""
        finished = self.advance(now)
        finished += self._settle(now)
        if req.state == "waiting":
            self.waiting.remove(req)
        elif req.state == "running":
            self.running.remove(req)
            self._release(req)
        elif req.state == "prefill":
            # Its prefill forward is already on the GPU; it is dropped when the forward ends.
            pass
        else:
            return finished
        req.state = "aborted"
        req.finished_at = self.now if req.finished_at is None else req.finished_at
        finished += self._plan()
        return finished

    def pause(self, mode: Literal["abort", "retract", "in_place"], now: float) -> tuple[list[SimReq], list[SimReq]]:
        """pause_generation. Returns (affected requests, finished while catching up).

        abort: every waiting and running request is aborted. retract: running requests go
        back to the head of the queue without their KV. in_place: running requests keep KV.
        Either way nothing is scheduled until `resume`. A prefill forward already on the GPU
        completes first; its requests are treated like running ones.
        """
        finished = self.advance(now)
        finished += self._settle(now)
        self.paused = True
        if self.phase is not None and self.phase.kind == "prefill":
            # Finish the in-flight prefill in place so the requests are in a definite state.
            finished += self._complete_phase()
        affected: list[SimReq] = []
        if mode == "abort":
            for r in list(self.waiting) + list(self.running):
                if r.state == "running":
                    self._release(r)
                r.state = "aborted"
                r.finished_at = self.now
                affected.append(r)
            self.waiting.clear()
            self.running.clear()
        elif mode == "retract":
            for r in reversed(self.running):
                self._retract(r)
                affected.append(r)
            self.running.clear()
        else:
            affected = list(self.running)
        return affected, finished

    def resume(self, now: float) -> list[SimReq]:
        finished = self.advance(now)
        self.paused = False
        finished += self._plan()
        return finished

    def request_reload(self, duration_s: float, now: float, on_done: Callable[[], None] | None = None) -> list[SimReq]:
        """Block the GPU for `duration_s` between two steps (weights swap); `on_done` fires at its end."""
        finished = self.advance(now)
        self._reload_queue.append((duration_s, on_done))
        finished += self._settle(now)
        finished += self._plan()
        return finished

    def flush_cache(self) -> bool:
        """SGLang refuses to flush while requests run; otherwise drop every cached block."""
        if self.running or self.prefilling:
            return False
        self.cache.clear()
        return True

    def cache_insert(self, hashes: list[int]) -> None:
        """Offer a finished sequence's blocks to the prefix cache (only free KV is used)."""
        free = self.cap.max_total_tokens - self.kv_used
        self.cache.insert(hashes, free)

    # ------------------------------------------------------------------ time
    def advance(self, now: float) -> list[SimReq]:
        """Run every phase that ends by `now`; returns requests that finished (target reached)."""
        finished: list[SimReq] = []
        if self.phase is None:
            self.now = max(self.now, now)
            finished += self._plan()
        while self.phase is not None and self.phase.end <= now:
            finished += self._complete_phase()
            finished += self._plan()
        if self.phase is None:
            self.now = max(self.now, now)
        return finished

    # ------------------------------------------------------------------ internals
    def _start(self, phase: Phase) -> None:
        self.phase = phase
        self._span_phase(phase)

    def _complete_phase(self) -> list[SimReq]:
        ph = self.phase
        assert ph is not None
        self.phase = None
        self.now = ph.end
        finished: list[SimReq] = []
        dur = ph.end - ph.start
        self._account(ph, dur)
        if ph.kind == "prefill":
            total_new = sum(n for n, _ in ph.parts) or 1
            for r, (n, _) in zip(ph.batch, ph.parts):
                r.work_s += dur * n / total_new
                if r.state == "aborted":
                    self._release(r)
                    continue
                r.done += 1               # the prefill forward samples the first new token
                self._private_kv += 1
                self.generated_tokens += 1
                if self.cache.enabled:
                    fresh = r.input_blocks[len(r.held_blocks):]
                    self.cache.adopt(fresh)
                    r.held_blocks = r.held_blocks + fresh
                    self._private_kv -= len(fresh) * self.cache.block_tokens
                if r.first_token_at is None:
                    r.first_token_at = ph.end
                if r.done >= r.target:
                    self._finish(r)
                    finished.append(r)
                else:
                    r.state = "running"
                    self.running.append(r)
        elif ph.kind == "decode":
            finished += self._apply_steps(ph, ph.steps, dur)
        elif ph.kind == "reload":
            if ph.on_done is not None:
                ph.on_done()
        return finished

    def _apply_steps(self, ph: Phase, steps: int, dur: float) -> list[SimReq]:
        finished: list[SimReq] = []
        share = dur / len(ph.batch) if ph.batch else 0.0
        self.decode_steps += steps
        self.new_token_ratio = max(self.cap.min_new_token_ratio, self.new_token_ratio - self._ratio_decay * steps)
        for r in ph.batch:
            if r.state != "running":
                continue
            r.done += steps
            r.work_s += share
            self._private_kv += steps
            self.generated_tokens += steps
            if r.done >= r.target:
                self.running.remove(r)
                self._finish(r)
                finished.append(r)
        return finished

    def _settle(self, now: float) -> list[SimReq]:
        """Cut a decode phase at the step in progress so the scheduler can react at `now`.

        Steps completed by `now` plus the one on the GPU are credited at once (the tokens of
        that last step appear up to one step early: negligible, and it keeps state simple);
        the GPU stays busy until that step's end as a batch-less 'tail' phase.
        """
        ph = self.phase
        if ph is None or ph.kind != "decode" or now >= ph.end:
            return []
        j = min(self.model.steps_within(now - ph.start, len(ph.batch), ph.kv0) + 1, ph.steps)
        if j >= ph.steps:
            return []
        dur = self.model.decode_steps_s(j, len(ph.batch), ph.kv0)
        finished = self._apply_steps(ph, j, dur)
        self._account(ph, dur)
        # A zero-length marker: its time is booked; the GPU is busy until `end`, after now.
        self.phase = Phase("tail", ph.start + dur, ph.start + dur)
        return finished

    def _finish(self, r: SimReq) -> None:
        r.state = "finished"
        r.finished_at = self.now
        self._release(r)

    def _release(self, r: SimReq) -> None:
        """Free a request's KV: its private tokens, and its references on cached blocks."""
        self._private_kv -= r.context - len(r.held_blocks) * self.cache.block_tokens
        self.cache.release(r.held_blocks)
        r.held_blocks = []

    def _retract(self, r: SimReq) -> None:
        self._release(r)
        r.state = "waiting"
        r.retractions += 1
        self.retractions += 1
        enqueue(self.waiting, r, by_priority=self.priority_scheduling, front=True)

    def _reserve(self, r: SimReq, ratio: float) -> float:
        return min(r.max_new_tokens - r.done, self.cap.clip_max_new_tokens) * ratio

    def _plan(self) -> list[SimReq]:
        """Pick the next GPU operation at self.now: reload > prefill > decode > idle."""
        finished: list[SimReq] = []
        if self.phase is not None:
            return finished
        if self._reload_queue:
            dur, cb = self._reload_queue.pop(0)
            self._start(Phase("reload", self.now, self.now + dur, on_done=cb))
            return finished
        if self.paused:
            self._close_span_if_idle()
            return finished
        if self.waiting and self._try_prefill():
            return finished
        while self.running:
            batch = len(self.running)
            kv = sum(r.context for r in self.running)
            k = min(r.remaining for r in self.running)
            if self.waiting:
                k = min(k, self.RECHECK_STEPS)
            if any(r.stream for r in self.running):
                k = min(k, self.STREAM_STEPS)
            free = self.cap.max_total_tokens - self.kv_used
            if free < k * batch:
                free += self.cache.evict(k * batch - free)
            if free < batch:
                if batch == 1:
                    break  # cannot happen: admission guarantees prompt + max_new fits
                victim = self.running.pop()
                self._retract(victim)
                self.new_token_ratio = self.cap.init_new_token_ratio
                continue
            k = max(1, min(k, free // batch))
            self.max_batch_seen = max(self.max_batch_seen, batch)
            dur = self.model.decode_steps_s(k, batch, kv)
            self._start(Phase("decode", self.now, self.now + dur, batch=list(self.running), steps=k, kv0=kv))
            return finished
        if self.waiting and self._try_prefill():
            return finished
        self._close_span_if_idle()
        return finished

    def _try_prefill(self) -> bool:
        """Admit a FIFO prefix of the queue that fits the KV budget and the chunk; start its prefill."""
        ratio = self.new_token_ratio
        running_reserve = sum(self._reserve(r, ratio) for r in self.running)
        budget = self.cap.max_total_tokens - self.kv_used - running_reserve
        batch: list[SimReq] = []
        parts: list[tuple[int, int]] = []
        new_total = 0
        bt = self.cache.block_tokens
        while self.waiting and len(self.running) + len(batch) < self.cap.max_running_requests:
            r = self.waiting[0]
            matched = self.cache.match(r.input_blocks)
            matched = min(matched, (r.context - 1) // bt)   # at least one token must be computed
            cached = matched * bt
            new = r.context - cached
            if batch and new_total + new > self.model.chunk_tokens:
                break
            need = new + min(r.max_new_tokens - r.done, self.cap.clip_max_new_tokens)
            # Blocks this request would reuse cannot be evicted to make room for it.
            reusable_unref = sum(1 for h in r.input_blocks[:matched] if self.cache.blocks.get(h) == 0) * bt
            if need > budget + self.cache.evictable_tokens - reusable_unref:
                break
            self.waiting.popleft()
            held = r.input_blocks[:matched]
            self.cache.acquire(held)
            if need > budget:
                budget += self.cache.evict(need - budget)
            budget -= need
            r.held_blocks = list(held)
            r.cached_tokens = cached
            r.prefill_tokens += new
            r.state = "prefill"
            self._private_kv += new
            self.prefill_token_count += new
            self.cached_token_count += cached
            batch.append(r)
            parts.append((new, cached))
            new_total += new
        if not batch:
            return False
        dur = self.model.prefill_s(parts)
        self._start(Phase("prefill", self.now, self.now + dur, batch=batch, parts=parts))
        return True
