"""A virtual-time model of SGLang's scheduler on one GPU (no I/O, no asyncio, no tokens).

The scheduler owns *when* things happen; the engine core (`tandem.engine.sim`) owns token ids
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
"""

from __future__ import annotations

from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Callable, Literal

from tandem.engine.queueing import enqueue
from tandem.sim.latency import LatencyModel
from tandem.sim.profiles import CapacityParams

ReqState = Literal["waiting", "prefill", "running", "finished", "aborted"]


# --------------------------------------------------------------------------- prefix cache
class PrefixCache:
    """Blocks of `block_tokens` tokens keyed by a chained hash, LRU, with reference counts."""

    def __init__(self, block_tokens: int, enabled: bool = True):
        self.block_tokens = block_tokens
        self.enabled = enabled
        self.blocks: OrderedDict[int, int] = OrderedDict()   # hash -> refcount; oldest first
        self.unreferenced = 0                                 # blocks with refcount 0

    @staticmethod
    def block_hashes(token_ids: list[int], block_tokens: int) -> list[int]:
        """Chained hashes of the full blocks of a token sequence (a prefix match is a hash match)."""
        out: list[int] = []
        h = 0
        for i in range(0, len(token_ids) - block_tokens + 1, block_tokens):
            h = hash((h, tuple(token_ids[i:i + block_tokens])))
            out.append(h)
        return out

    @property
    def size_tokens(self) -> int:
        return len(self.blocks) * self.block_tokens

    @property
    def evictable_tokens(self) -> int:
        return self.unreferenced * self.block_tokens

    def match(self, hashes: list[int]) -> int:
        """Number of leading blocks of `hashes` present in the cache."""
        if not self.enabled:
            return 0
        n = 0
        for h in hashes:
            if h not in self.blocks:
                break
            n += 1
        return n

    def acquire(self, hashes: list[int]) -> None:
        for h in hashes:
            ref = self.blocks[h]
            if ref == 0:
                self.unreferenced -= 1
            self.blocks[h] = ref + 1
            self.blocks.move_to_end(h)

    def release(self, hashes: list[int]) -> None:
        for h in hashes:
            ref = self.blocks.get(h)
            if ref is None:
                continue
            self.blocks[h] = ref - 1
            if ref == 1:
                self.unreferenced += 1

    def adopt(self, hashes: list[int]) -> None:
        """A running request's freshly prefilled blocks join the tree (SGLang caches unfinished
        requests), so siblings with the same prompt share them instead of holding copies."""
        for h in hashes:
            ref = self.blocks.get(h)
            if ref is None:
                self.blocks[h] = 1
            else:
                if ref == 0:
                    self.unreferenced -= 1
                self.blocks[h] = ref + 1
            self.blocks.move_to_end(h)

    def insert(self, hashes: list[int], budget_tokens: int) -> None:
        """Cache a finished sequence's blocks, but only within `budget_tokens` of free KV."""
        if not self.enabled:
            return
        for h in hashes:
            if h in self.blocks:
                self.blocks.move_to_end(h)
                continue
            if budget_tokens < self.block_tokens:
                break
            self.blocks[h] = 0
            self.unreferenced += 1
            budget_tokens -= self.block_tokens

    def evict(self, tokens: int) -> int:
        """Evict least-recently-used unreferenced blocks until `tokens` are freed; returns freed."""
        freed = 0
        if tokens <= 0 or self.unreferenced == 0:
            return 0
        for h in list(self.blocks):
            if freed >= tokens:
                break
            if self.blocks[h] == 0:
                del self.blocks[h]
                self.unreferenced -= 1
                freed += self.block_tokens
        return freed

    def clear(self) -> int:
        """Drop every unreferenced block (flush_cache); returns tokens freed."""
        return self.evict(self.size_tokens)


# --------------------------------------------------------------------------- requests
@dataclass(eq=False)
class SimReq:
    rid: str
    input_len: int
    max_new_tokens: int
    """The client's limit; admission reserves against it (clipped)."""
    target: int
    """Tokens this request will generate before it finishes (<= max_new_tokens)."""
    input_blocks: list[int] = field(default_factory=list)
    """Prefix-cache block hashes of the input ids."""
    payload: Any = None
    stream: bool = False
    """A streaming client: decode runs are cut every STREAM_STEPS so tokens flow out step-wise."""
    priority: int = 0
    """SGLang request priority (larger first) when the scheduler orders its queue by priority."""

    state: ReqState = "waiting"
    done: int = 0
    """Tokens generated so far."""
    held_blocks: list[int] = field(default_factory=list)
    cached_tokens: int = 0
    """Prompt tokens served from the prefix cache at the last admission."""
    submitted_at: float = 0.0
    first_token_at: float | None = None
    finished_at: float | None = None
    work_s: float = 0.0
    """This request's share of engine busy time (model seconds)."""
    prefill_tokens: int = 0
    retractions: int = 0

    @property
    def context(self) -> int:
        return self.input_len + self.done

    @property
    def remaining(self) -> int:
        return self.target - self.done


@dataclass
class Phase:
    """What the GPU is doing from `start` to `end` (model seconds)."""

    kind: Literal["prefill", "decode", "tail", "reload"]
    start: float
    end: float
    batch: list[SimReq] = field(default_factory=list)
    steps: int = 0                      # decode: steps planned
    kv0: int = 0                        # decode: KV tokens of the batch at start
    parts: list[tuple[int, int]] = field(default_factory=list)  # prefill: (new, prev) per request
    on_done: Callable[[], None] | None = None   # reload: completion callback


@dataclass
class BusySpan:
    """A stretch of model time in which the GPU never idled."""

    start: float
    end: float
    busy_s: float = 0.0
    """Generation time (prefill + decode) inside the span."""
    reload_s: float = 0.0
    """Weight-reload time inside the span."""


# --------------------------------------------------------------------------- scheduler
class SimScheduler:
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
        # accounting
        self.busy_s = 0.0
        self.prefill_busy_s = 0.0
        self.decode_busy_s = 0.0
        self.reload_busy_s = 0.0
        self.decode_steps = 0
        self.generated_tokens = 0
        self.prefill_token_count = 0
        self.cached_token_count = 0
        self.retractions = 0
        self.max_batch_seen = 0
        self.spans: list[BusySpan] = []
        """Closed busy spans not yet collected by the caller (`pop_spans`)."""
        self._open_span: BusySpan | None = None

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

    def busy_until(self, now: float) -> float:
        """Cumulative busy model-seconds at `now`, counting the current phase up to `now`."""
        ph = self.phase
        if ph is None or now <= ph.start:
            return self.busy_s
        return self.busy_s + min(now, ph.end) - ph.start

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

    def pop_spans(self, close_open: bool = False) -> list[BusySpan]:
        """Closed busy spans since the last call; `close_open` also hands over the open one."""
        out, self.spans = self.spans, []
        if close_open and self._open_span is not None:
            out.append(self._open_span)
            self._open_span = None
        return out

    # ------------------------------------------------------------------ internals
    def _start(self, phase: Phase) -> None:
        self.phase = phase
        sp = self._open_span
        if sp is not None and phase.start > sp.end + 1e-12:
            self.spans.append(sp)
            sp = None
        if sp is None:
            self._open_span = BusySpan(phase.start, phase.start)

    def _account(self, phase: Phase, duration: float) -> None:
        """Book `duration` model-seconds of `phase`, which ran from phase.start."""
        self.busy_s += duration
        sp = self._open_span
        if sp is not None:
            sp.end = max(sp.end, phase.start + duration)
            if phase.kind == "reload":
                sp.reload_s += duration
            else:
                sp.busy_s += duration
        if phase.kind == "prefill":
            self.prefill_busy_s += duration
        elif phase.kind in ("decode", "tail"):
            self.decode_busy_s += duration
        else:
            self.reload_busy_s += duration

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

    def _close_span_if_idle(self) -> None:
        if self.phase is None and self._open_span is not None:
            self.spans.append(self._open_span)
            self._open_span = None

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
