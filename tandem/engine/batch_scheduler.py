"""The embedded engine's continuous-batching scheduler: what one step on the scheduler thread does.

Each step: admit waiting requests (FIFO or by priority, capped by max_running_requests and a
max_total_tokens KV budget) -> prefill them together (left padded, explicit position ids) and
merge their KV into the running batch -> one decode step for the whole batch -> drop finished
rows. Commands posted from the event loop (abort, pause, resume, flush) also run here, between
two steps; `tandem.engine.embedded` owns the thread and the posting.

Everything here is touched by the scheduler thread only, except the plain-int counters
(`n_running`, `n_waiting`, `n_tokens`, `max_batch_seen`) that get_load reads from the loop
thread, where a torn read is harmless.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from typing import Any, Callable, Literal

import torch

from tandem.engine.backend import ServingCore
from tandem.engine.batch import RunningBatch, left_padded
from tandem.engine.kv_cache import new_cache
from tandem.engine.lora_layers import LoraLayers
from tandem.engine.queueing import enqueue
from tandem.engine.request import FinishReason, GenerateRequest
from tandem.engine.routing_capture import RoutingCapture
from tandem.engine.sampling import RowParams, record_prompt_logprobs, sample, wants_prompt_logprobs


log = logging.getLogger("tandem.engine.embedded")

# Most prompt tokens (padded) prefilled in one forward; bounds prefill activation memory.
MAX_PREFILL_TOKENS = 16384


def _kv_need(r: GenerateRequest) -> int:
    """KV tokens reserved for `r` while it is admitted: its prompt plus every token it may generate."""
    return len(r.input_ids) + r.sampling.max_new_tokens


class BatchScheduler:
    """Waiting queue, running batch and KV budget of one HF causal LM."""

    def __init__(self, *, model: Any, device: torch.device, pad_id: int, seed: int, max_running_requests: int,
                 max_total_tokens: int, priority_scheduling: bool, lora: LoraLayers | None = None):
        self.model = model
        self.lora = lora
        """The served LoRA adapters (engine started with LoRA); each forward tells it every row's adapter."""
        self.device = device
        self.pad_id = pad_id
        self.max_running_requests = max_running_requests
        self.max_total_tokens = max_total_tokens
        self.priority_scheduling = priority_scheduling
        cfg = model.config.get_text_config()
        self.num_layers = cfg.num_hidden_layers
        self.logits_vocab = model.get_output_embeddings().weight.shape[0]
        self.routing = RoutingCapture(model)
        """The experts each fed token was routed to (MoE models), for requests with return_routed_experts."""
        self.generator = torch.Generator(device=device).manual_seed(seed)
        # Decode steps hand SDPA a ready 4D view of the padding mask (skipping transformers' per-step
        # mask construction); only valid when every layer is plain full causal attention.
        layer_types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
        self.direct_mask = (getattr(cfg, "_attn_implementation", None) == "sdpa"
                            and layer_types == {"full_attention"})
        self.core: ServingCore | None = None
        """Where tokens are reported (notify, weight_version); set when the backend is attached."""
        self.waiting: deque[GenerateRequest] = deque()
        self.batch: RunningBatch | None = None
        self.params: RowParams | None = None
        self.paused = False
        self.reserved_tokens = 0
        self.n_running = 0
        self.n_waiting = 0
        self.n_tokens = 0
        self.max_batch_seen = 0
        self.stats = {"decode_steps": 0, "decode_time_s": 0.0, "decoded_tokens": 0,
                      "prefill_batches": 0, "prefill_time_s": 0.0, "prefill_requests": 0}

    # ------------------------------------------------------------------ stepping
    def enqueue(self, req: GenerateRequest) -> None:
        enqueue(self.waiting, req, by_priority=self.priority_scheduling)

    def has_work(self) -> bool:
        return not self.paused and (self.batch is not None or bool(self.waiting))

    def step(self) -> None:
        """Admit and prefill what fits, then one decode step for the whole batch."""
        with torch.inference_mode():
            t0 = time.perf_counter()
            if self._admit():
                t1 = time.perf_counter()
                self.stats["prefill_time_s"] += t1 - t0
                if log.isEnabledFor(logging.DEBUG):
                    log.debug("prefill: %d running after, %.2f ms", self.n_running, (t1 - t0) * 1e3)
                t0 = t1
            if self.batch is not None:
                n = self.batch.size
                self._decode_step()
                self.stats["decode_time_s"] += time.perf_counter() - t0
                self.stats["decode_steps"] += 1
                self.stats["decoded_tokens"] += n

    # ------------------------------------------------------------------ commands
    def abort(self, rids: set[str] | None) -> int:
        hit_w = [r for r in self.waiting if rids is None or r.rid in rids]
        if hit_w:
            self.waiting = deque(r for r in self.waiting if not (rids is None or r.rid in rids))
        hit_r: list[int] = []
        reqs = hit_w
        if self.batch is not None:
            hit_r = [i for i, r in enumerate(self.batch.reqs) if rids is None or r.rid in rids]
            reqs = hit_w + [self.batch.reqs[i] for i in hit_r]
        if hit_r:
            self._drop_rows(set(hit_r))
        self._finish(reqs, FinishReason.abort)
        self._update_counters()
        return len(reqs)

    def pause(self, mode: Literal["retract", "in_place"]) -> int:
        self.paused = True
        held = (self.batch.size if self.batch is not None else 0) + len(self.waiting)
        if mode == "retract" and self.batch is not None:
            # Back to the head of the queue, KV dropped; re-prefilled from prompt + output.
            for r in reversed(self.batch.reqs):
                r.num_retractions += 1
                enqueue(self.waiting, r, by_priority=self.priority_scheduling, front=True)
            self.batch = None
            self.params = None
            self.reserved_tokens = 0
            self._update_counters()
        return held

    def resume(self) -> None:
        self.paused = False

    def flush(self) -> tuple[bool, str]:
        running = self.batch.size if self.batch is not None else 0
        queued = sum(1 for r in self.waiting if r.num_retractions == 0)
        if running or queued:
            return False, (f"Cache not flushed: {running} running and {queued} waiting request(s) hold or "
                           "need the KV cache (pause with mode='retract' or 'abort' first).")
        return True, "Cache flushed."

    def fail_all(self, message: str) -> None:
        reqs = list(self.waiting) + (self.batch.reqs if self.batch is not None else [])
        self.waiting.clear()
        self.batch = None
        self.reserved_tokens = 0
        self._finish(reqs, lambda: FinishReason.abort(message))
        self._update_counters()

    def _finish(self, reqs: list[GenerateRequest], reason_factory: Callable[[], FinishReason]) -> None:
        assert self.core is not None
        for r in reqs:
            r.weight_version = self.core.weight_version
            r.finish(reason_factory())
        self.core.notify(reqs)

    def _update_counters(self) -> None:
        b = self.batch
        self.n_running = b.size if b is not None else 0
        self.n_waiting = len(self.waiting)
        self.n_tokens = sum(len(r.input_ids) + len(r.output_ids) for r in b.reqs) if b is not None else 0

    # ------------------------------------------------------------------ admission + prefill
    def _admit(self) -> bool:
        new = self._take_admissible()
        if new:
            try:
                self._prefill(new)
            except Exception:
                # They left the queue but never joined the batch: finish them here, or their callers hang.
                self._finish([r for r in new if r.finish_reason is None],
                             lambda: FinishReason.abort("engine error during prefill"))
                for r in new:
                    self.reserved_tokens -= _kv_need(r)
                raise
            self.stats["prefill_batches"] += 1
            self.stats["prefill_requests"] += len(new)
            self._update_counters()
        return bool(new)

    def _take_admissible(self) -> list[GenerateRequest]:
        """Pop the waiting requests that fit (rows, KV budget, prefill size), reserving their KV."""
        if not self.waiting:
            return []
        running = self.batch.size if self.batch is not None else 0
        new: list[GenerateRequest] = []
        longest = 0
        while self.waiting and running + len(new) < self.max_running_requests:
            r = self.waiting[0]
            ctx = len(r.input_ids) + len(r.output_ids)
            need = _kv_need(r)
            if (running or new) and self.reserved_tokens + need > self.max_total_tokens:
                break
            if new and max(longest, ctx) * (len(new) + 1) > MAX_PREFILL_TOKENS:
                break
            # Prompt logprobs materialise [prompt_len, vocab] logits: such a request prefills alone.
            if new and (wants_prompt_logprobs(r) or wants_prompt_logprobs(new[0])):
                break
            self.waiting.popleft()
            if r.finish_reason is not None:
                continue
            new.append(r)
            longest = max(longest, ctx)
            self.reserved_tokens += need
        return new

    def _prefill(self, reqs: list[GenerateRequest]) -> None:
        seqs = [r.input_ids + r.output_ids for r in reqs]
        ids, mask = left_padded(seqs, self.pad_id)
        ids, mask = ids.to(self.device), mask.to(self.device)
        B, L = ids.shape
        pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)
        want_input_lp = [wants_prompt_logprobs(r) for r in reqs]
        cache = new_cache(self.num_layers)
        self._set_adapters(reqs)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                         logits_to_keep=0 if any(want_input_lp) else 1)
        logits = out.logits
        if self._routing_wanted(reqs):
            routed = self.routing.take(B, L)
            for i, (r, seq) in enumerate(zip(reqs, seqs)):  # a re-prefill (after a retraction) starts over
                r.routed_chunks = [routed[i, L - len(seq):]] if r.return_routed_experts else []
        fresh = RunningBatch.from_prefill(reqs, cache, mask, pos[:, -1] + 1, self.logits_vocab, self.device)
        if any(want_input_lp):
            record_prompt_logprobs(reqs, want_input_lp, seqs, logits, fresh, L)
        self.batch = fresh if self.batch is None else RunningBatch.merge(self.batch, fresh)
        self.params = RowParams.of(self.batch.reqs, self.logits_vocab)
        # The prefill's last position predicts each new row's next token.
        tok, lp, top = sample(logits[:, -1, :], fresh, RowParams.of(fresh.reqs, self.logits_vocab), self.generator)
        b = self.batch
        b.last_tok[b.size - B:] = tok
        self._commit(list(range(b.size - B, b.size)), tok, lp, top)

    # ------------------------------------------------------------------ decode
    def _decode_step(self) -> None:
        b = self.batch
        assert b is not None and self.params is not None
        width = b.open_column()
        mask = b.mask[:, :width]
        if self.direct_mask:
            # SDPA runs a slower kernel for any mask (15-20% of a decode step measured on CPU at
            # 23M parameters), so a window where no row is padded (one group's copies of a prompt,
            # or prompts of one length) passes none: the last position may see every column.
            mask = None if bool(mask.all()) else mask[:, None, None, :]
        self._set_adapters(b.reqs)
        out = self.model(input_ids=b.last_tok[:, None], attention_mask=mask,
                         position_ids=b.next_pos[:, None], cache=b.cache, use_cache=True)
        b.next_pos += 1
        if self._routing_wanted(b.reqs):
            routed = self.routing.take(b.size, 1)
            for i, r in enumerate(b.reqs):
                if r.return_routed_experts:
                    r.routed_chunks.append(routed[i])
        tok, lp, top = sample(out.logits[:, -1, :], b, self.params, self.generator)
        b.last_tok = tok
        self.max_batch_seen = max(self.max_batch_seen, b.size)
        self._commit(list(range(b.size)), tok, lp, top)

    def _routing_wanted(self, reqs: list[GenerateRequest]) -> bool:
        return self.routing.enabled and any(r.return_routed_experts for r in reqs)

    def _set_adapters(self, reqs: list[GenerateRequest]) -> None:
        if self.lora is not None:
            self.lora.rows = [r.lora_name for r in reqs]

    def _commit(self, rows: list[int], tok: torch.Tensor, lp: torch.Tensor, top: Any) -> None:
        """Hand sampled tokens to their requests (one device->host copy), drop finished rows."""
        b = self.batch
        assert b is not None and self.core is not None
        # One device->host transfer for both (token ids are exact in float64).
        toks_f, lps = torch.stack([tok.double(), lp.double()]).tolist()
        toks = [int(t) for t in toks_f]
        if top is not None:
            tv, ti = top.values.tolist(), top.indices.tolist()
        ver = self.core.weight_version
        done: set[int] = set()
        touched = []
        for j, i in enumerate(rows):
            r = b.reqs[i]
            if r.finish_reason is not None:  # aborted elsewhere; should not happen, be safe
                done.add(i)
                continue
            t_top = None
            if top is not None and r.top_logprobs_num > 0 and r.return_logprob:
                k = r.top_logprobs_num
                t_top = list(zip(tv[j][:k], ti[j][:k]))
            if r.append_token(toks[j], lps[j], ver, t_top) is not None:
                done.add(i)
            touched.append(r)
        self.core.notify(touched)
        if done:
            self._drop_rows(done)
        self._update_counters()

    def _drop_rows(self, drop: set[int]) -> None:
        b = self.batch
        assert b is not None
        for i in drop:
            self.reserved_tokens -= _kv_need(b.reqs[i])
        keep = [i for i in range(b.size) if i not in drop]
        if not keep:
            self.batch = None
            self.params = None
            self.reserved_tokens = 0
            return
        b.keep_rows(keep)
        self.params = RowParams.of(b.reqs, self.logits_vocab)


__all__ = ["BatchScheduler", "MAX_PREFILL_TOKENS"]
