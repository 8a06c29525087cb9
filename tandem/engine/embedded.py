"""The embedded engine core: continuous batching over an HF causal LM (CPU or CUDA).

One scheduler thread owns the model and the running batch; the HTTP event loop only posts
commands to it (submit, abort, pause, resume, weight swap, flush) and is woken once per step.
Each loop iteration: run posted commands -> admit waiting requests (FIFO, capped by
max_running_requests and a max_total_tokens KV budget) -> prefill them together (left padded,
explicit position ids) and merge their KV into the running batch -> one decode step for the
whole batch -> drop finished rows.

KV layout: every layer keeps one preallocated [batch, kv_heads, capacity, head_dim] slab; all
rows share one time axis (left padding), so a decode step appends one column for everyone and
needs no per-row bookkeeping. A 2D attention mask marks the padding and per-row position ids
keep RoPE correct. Merging new rows pads the shorter side on the left; dropping rows is an
index_select; all-padding columns on the left are trimmed when they pile up.

Logprobs: the logprob reported for a sampled token is log_softmax(logits / temperature)[token],
i.e. the temperature-scaled distribution *before* top-p / top-k / min-p filtering (what SGLang
reports and what the trainer recomputes with the same temperature). Temperature 0 (greedy)
reports log_softmax(logits) of the argmax token. Prompt logprobs (logprob_start_len >= 0) use
the same temperature.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import threading
import time
import traceback
import zlib
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Literal

import torch

from tandem.engine.core import EngineCore, FinishReason, GenerateRequest, LoadInfo
from tandem.engine.queueing import enqueue

log = logging.getLogger("tandem.engine.embedded")

# Most prompt tokens (padded) prefilled in one forward; bounds prefill activation memory.
MAX_PREFILL_TOKENS = 16384
# Trim left all-padding columns once they exceed this many and a quarter of the time axis.
TRIM_MIN_COLS = 64
# KV time-axis capacity grows in chunks of this many columns (amortises reallocation).
KV_GROW = 256


class WeightLoadError(RuntimeError):
    """A weight directory that cannot be swapped in; the message is returned to the caller."""


# --------------------------------------------------------------------------- KV cache
try:  # transformers >= 5: cache layers are objects the model calls `update` on
    from transformers.cache_utils import Cache, DynamicLayer
except ImportError:  # pragma: no cover - tandem pins transformers 5
    Cache = DynamicLayer = None  # type: ignore[assignment]


class SlabLayer(DynamicLayer):  # type: ignore[misc, valid-type]
    """A cache layer over a preallocated slab: appending a column is a slice write, not a cat."""

    def __init__(self) -> None:
        super().__init__()
        self.kbuf: torch.Tensor | None = None
        self.vbuf: torch.Tensor | None = None
        self.length = 0

    # HF API -------------------------------------------------------------
    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        end = self.length + n
        if self.kbuf is None:
            b, h, _, d = key_states.shape
            cap = end + KV_GROW
            self.kbuf = key_states.new_zeros((b, h, cap, d))
            self.vbuf = value_states.new_zeros((b, h, cap, value_states.shape[-1]))
        elif end > self.kbuf.shape[2]:
            self.reserve(end + KV_GROW)
        self.kbuf[:, :, self.length:end] = key_states
        self.vbuf[:, :, self.length:end] = value_states
        self.length = end
        self.keys = self.kbuf[:, :, :end]
        self.values = self.vbuf[:, :, :end]
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        return self.length + query_length, 0

    # tandem batch surgery -----------------------------------------------
    def reserve(self, cap: int) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        if cap <= self.kbuf.shape[2]:
            return
        b, h, _, d = self.kbuf.shape
        k = self.kbuf.new_zeros((b, h, cap, d))
        v = self.vbuf.new_zeros((b, h, cap, self.vbuf.shape[-1]))
        k[:, :, :self.length] = self.kbuf[:, :, :self.length]
        v[:, :, :self.length] = self.vbuf[:, :, :self.length]
        self.kbuf, self.vbuf = k, v

    def select_rows(self, idx: torch.Tensor) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        self.kbuf = self.kbuf.index_select(0, idx)
        self.vbuf = self.vbuf.index_select(0, idx)
        self.keys = self.kbuf[:, :, :self.length]
        self.values = self.vbuf[:, :, :self.length]

    def trim_left(self, cols: int) -> None:
        assert self.kbuf is not None and self.vbuf is not None
        self.kbuf = self.kbuf[:, :, cols:].clone()
        self.vbuf = self.vbuf[:, :, cols:].clone()
        self.length -= cols
        self.keys = self.kbuf[:, :, :self.length]
        self.values = self.vbuf[:, :, :self.length]

    @staticmethod
    def merge(a: "SlabLayer", b: "SlabLayer") -> "SlabLayer":
        """Rows of a then rows of b on one right-aligned time axis of max(len a, len b)."""
        assert a.kbuf is not None and b.kbuf is not None and a.vbuf is not None and b.vbuf is not None
        t = max(a.length, b.length)
        cap = t + KV_GROW
        ba, bb = a.kbuf.shape[0], b.kbuf.shape[0]
        h, d, dv = a.kbuf.shape[1], a.kbuf.shape[3], a.vbuf.shape[3]
        out = SlabLayer()
        out.device, out.dtype, out.is_initialized = a.device, a.dtype, True
        out.kbuf = a.kbuf.new_zeros((ba + bb, h, cap, d))
        out.vbuf = a.vbuf.new_zeros((ba + bb, h, cap, dv))
        out.kbuf[:ba, :, t - a.length:t] = a.kbuf[:, :, :a.length]
        out.vbuf[:ba, :, t - a.length:t] = a.vbuf[:, :, :a.length]
        out.kbuf[ba:, :, t - b.length:t] = b.kbuf[:, :, :b.length]
        out.vbuf[ba:, :, t - b.length:t] = b.vbuf[:, :, :b.length]
        out.length = t
        out.keys = out.kbuf[:, :, :t]
        out.values = out.vbuf[:, :, :t]
        return out


def new_cache(num_layers: int) -> Any:
    return Cache(layers=[SlabLayer() for _ in range(num_layers)])


# --------------------------------------------------------------------------- the running batch
@dataclass
class _Batch:
    """Rows being decoded together. Tensors are aligned with `reqs` (row i = reqs[i])."""

    reqs: list[GenerateRequest]
    cache: Any                 # Cache of SlabLayers
    mask: torch.Tensor         # [B, cap] bool; columns [0, length) valid, True = real token
    next_pos: torch.Tensor     # [B] long: position id of the token fed next
    last_tok: torch.Tensor     # [B] long: token fed next
    temp: torch.Tensor         # [B] float: temperature used for scaling (1.0 for greedy rows)
    greedy: torch.Tensor       # [B] bool
    top_p: torch.Tensor        # [B] float
    top_k: torch.Tensor        # [B] long (vocab size when disabled)
    min_p: torch.Tensor        # [B] float

    @property
    def size(self) -> int:
        return len(self.reqs)

    @property
    def length(self) -> int:
        return self.cache.layers[0].length


@dataclass
class _RowParams:
    """Per-row sampling flags computed once per batch membership change (not per step)."""

    all_greedy: bool
    any_greedy: bool
    uniform_temp: float | None   # a single temperature shared by all non-greedy rows, if any
    need_filter: bool            # some row uses top_p < 1, top_k, or min_p > 0
    top_n: int                   # max top_logprobs_num across rows (0: none)


class EmbeddedCore(EngineCore):
    """EngineCore over an HF causal LM, continuous batching on one scheduler thread."""

    backend = "embedded"

    def __init__(self, *, model: Any, tokenizer: Any, model_path: str, device: str = "cpu",
                 served_model_name: str | None = None, weight_version: str = "0",
                 max_running_requests: int = 64, max_total_tokens: int = 262144,
                 context_length: int | None = None, seed: int = 0, priority_scheduling: bool = False):
        if context_length is None:
            context_length = getattr(model.config, "max_position_embeddings", None)
        super().__init__(tokenizer=tokenizer, model_path=model_path, served_model_name=served_model_name,
                         weight_version=weight_version, max_running_requests=max_running_requests,
                         max_total_tokens=max_total_tokens, context_length=context_length,
                         priority_scheduling=priority_scheduling)
        self.model = model.eval()
        self.device = torch.device(device)
        self.num_layers = model.config.get_text_config().num_hidden_layers
        # Model-level eos ids (generation_config) count as eos too, as in SGLang.
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            extra = gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]
            self.eos_token_ids = self.eos_token_ids | frozenset(int(e) for e in extra)
        self.logits_vocab = model.get_output_embeddings().weight.shape[0]
        pad = getattr(tokenizer, "pad_token_id", None)
        self.pad_id = int(pad) if pad is not None else 0
        self.generator = torch.Generator(device=self.device).manual_seed(seed)
        # Decode steps hand SDPA a ready 4D view of the padding mask (skipping transformers' per-step
        # mask construction); only valid when every layer is plain full causal attention.
        cfg = model.config.get_text_config()
        layer_types = set(getattr(cfg, "layer_types", None) or ["full_attention"])
        self._direct_mask = (getattr(cfg, "_attn_implementation", None) == "sdpa"
                             and layer_types == {"full_attention"})

        self._cmds: deque[tuple[Callable[[], Any], concurrent.futures.Future | None]] = deque()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        # Scheduler-thread state.
        self._waiting: deque[GenerateRequest] = deque()
        self._inbox: deque[GenerateRequest] = deque()   # appended by the loop, drained by the thread
        self._batch: _Batch | None = None
        self._params: _RowParams | None = None
        self._thread_paused = False
        self._reserved_tokens = 0
        # Read by get_load from the loop thread (plain ints: torn reads are harmless).
        self._n_running = 0
        self._n_waiting = 0
        self._n_tokens = 0
        self._max_batch_seen = 0
        self._stats = {"decode_steps": 0, "decode_time_s": 0.0, "decoded_tokens": 0,
                       "prefill_batches": 0, "prefill_time_s": 0.0, "prefill_requests": 0}

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg: Any, *, model_path: str, name: str = "engine") -> "EmbeddedCore":
        from tandem.model_source import pick_device

        return cls.load(
            model_path, device=pick_device(cfg.engine.device), dtype=cfg.model.dtype,
            trust_remote_code=cfg.model.trust_remote_code, served_model_name=cfg.model.path,
            max_running_requests=cfg.engine.max_running_requests, max_total_tokens=cfg.engine.max_total_tokens,
            priority_scheduling=cfg.engine.priority_scheduling,
            # Engines sample independently: same run seed, different stream per engine name.
            seed=cfg.run.seed * 1_000_003 + zlib.crc32(name.encode()))

    @classmethod
    def load(cls, model_path: str, *, device: str = "cpu", dtype: str = "float32",
             trust_remote_code: bool = False, **kw: Any) -> "EmbeddedCore":
        from tandem.model_source import load_causal_lm, load_tokenizer

        tok = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
        model = load_causal_lm(model_path, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
        return cls(model=model, tokenizer=tok, model_path=model_path, device=device, **kw)

    # ------------------------------------------------------------------ lifecycle
    async def _start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tandem-scheduler", daemon=True)
        self._thread.start()

    async def _shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10.0)

    def _alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ loop -> thread
    def _post(self, fn: Callable[[], Any], want_result: bool = True) -> concurrent.futures.Future | None:
        fut: concurrent.futures.Future | None = concurrent.futures.Future() if want_result else None
        self._cmds.append((fn, fut))
        self._wake.set()
        return fut

    async def _call(self, fn: Callable[[], Any]) -> Any:
        if not self._alive():
            raise RuntimeError("the engine's scheduler thread is not running")
        fut = self._post(fn)
        assert fut is not None
        return await asyncio.wrap_future(fut)

    def _submit(self, req: GenerateRequest) -> None:
        self._inbox.append(req)
        self._wake.set()

    async def _abort(self, rids: list[str] | None) -> int:
        return await self._call(lambda: self._t_abort(None if rids is None else set(rids)))

    async def _pause(self, mode: Literal["retract", "in_place"]) -> int:
        return await self._call(lambda: self._t_pause(mode))

    async def _resume(self) -> None:
        await self._call(self._t_resume)

    async def _flush_cache(self) -> tuple[bool, str]:
        return await self._call(self._t_flush)

    async def _load_weights(self, model_path: str, load_format: str | None) -> tuple[bool, str]:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        try:
            # Reading and checking the files happens off the scheduler thread, so decoding
            # continues meanwhile; only the in-place copy below runs between two steps.
            tensors = await loop.run_in_executor(None, self._read_weights, model_path, load_format)
            await self._call(lambda: self._t_swap(tensors))
        except WeightLoadError as err:
            return False, f"Failed to update weights from {model_path!r}: {err}. The old weights are kept."
        return True, f"Succeeded to update model weights in {time.perf_counter() - t0:.3f}s."

    def get_load(self) -> LoadInfo:
        return LoadInfo(
            num_running_reqs=self._n_running, num_waiting_reqs=self._n_waiting + len(self._inbox),
            num_tokens=self._n_tokens,
            max_running_requests=self.max_running_requests, max_total_tokens=self.max_total_tokens,
            max_running_batch_seen=self._max_batch_seen, num_pending_admission=self._pending_admission,
            paused=self.paused)

    def server_info(self) -> dict[str, Any]:
        info = super().server_info()
        info.update(device=str(self.device), dtype=str(next(self.model.parameters()).dtype).removeprefix("torch."),
                    torch_threads=torch.get_num_threads(), scheduler_stats=dict(self._stats))
        return info

    def model_info(self) -> dict[str, Any]:
        info = super().model_info()
        cfg = self.model.config
        info.update(model_type=getattr(cfg, "model_type", None), architectures=getattr(cfg, "architectures", None))
        return info

    # ------------------------------------------------------------------ weights
    def _read_weights(self, model_path: str, load_format: str | None) -> dict[str, torch.Tensor]:
        """Read every safetensors shard of an HF directory and check it against the live model."""
        from safetensors import safe_open

        if load_format not in (None, "auto", "safetensors"):
            raise WeightLoadError(f"load_format {load_format!r} is not supported (use safetensors)")
        root = Path(model_path)
        if not root.is_dir():
            raise WeightLoadError("the directory does not exist")
        files = sorted(root.glob("*.safetensors"))
        index = root / "model.safetensors.index.json"
        if index.exists():
            try:
                names = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            except (ValueError, KeyError) as err:
                raise WeightLoadError(f"unreadable {index.name}: {err}") from None
            files = [root / n for n in names]
        if not files:
            raise WeightLoadError("no *.safetensors files in the directory")
        live = dict(self.model.named_parameters())
        live.update(dict(self.model.named_buffers()))
        out: dict[str, torch.Tensor] = {}
        for f in files:
            try:
                with safe_open(str(f), framework="pt", device="cpu") as sf:
                    for name in sf.keys():
                        if name not in live:
                            raise WeightLoadError(f"{f.name}: tensor {name!r} is not a parameter of the served model")
                        t = sf.get_tensor(name)
                        if tuple(t.shape) != tuple(live[name].shape):
                            raise WeightLoadError(f"{f.name}: tensor {name!r} has shape {tuple(t.shape)}, "
                                                  f"the model has {tuple(live[name].shape)}")
                        out[name] = t.to(device=self.device, dtype=live[name].dtype)
            except WeightLoadError:
                raise
            except Exception as err:  # corrupt / truncated files, missing shards
                raise WeightLoadError(f"{f.name}: {err}") from None
        tied = self._tied_names()
        missing = [n for n, _ in self.model.named_parameters() if n not in out and n not in tied]
        if missing:
            raise WeightLoadError(f"{len(missing)} parameter(s) missing, e.g. {missing[:3]}")
        return out

    def _tied_names(self) -> set[str]:
        """Parameters that share storage with another one (tied embeddings) need not be in the file."""
        seen: dict[int, str] = {}
        tied: set[str] = set()
        for name, p in self.model.named_parameters(remove_duplicate=False):
            key = p.data_ptr()
            if key in seen:
                tied.add(name)
                tied.add(seen[key])
            else:
                seen[key] = name
        return tied

    # ------------------------------------------------------------------ the scheduler thread
    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stop:
            try:
                self._run_commands()
                busy = not self._thread_paused and (self._batch is not None or bool(self._waiting))
                if not busy:
                    self._wake.wait(0.5)  # every producer of work sets _wake; this is a safety net
                    self._wake.clear()
                    continue
                with torch.inference_mode():
                    t0 = time.perf_counter()
                    if self._admit():
                        t1 = time.perf_counter()
                        self._stats["prefill_time_s"] += t1 - t0
                        if log.isEnabledFor(logging.DEBUG):
                            log.debug("prefill: %d running after, %.2f ms", self._n_running, (t1 - t0) * 1e3)
                        t0 = t1
                    if self._batch is not None:
                        n = self._batch.size
                        self._decode_step()
                        self._stats["decode_time_s"] += time.perf_counter() - t0
                        self._stats["decode_steps"] += 1
                        self._stats["decoded_tokens"] += n
            except Exception:  # keep serving: fail the requests in flight, not the process
                log.error("scheduler step failed:\n%s", traceback.format_exc())
                self._fail_all("engine error: " + traceback.format_exc(limit=1).strip().splitlines()[-1])
        self._drain_inbox()
        self._fail_all("engine shutting down")

    def _drain_inbox(self) -> None:
        while self._inbox:
            enqueue(self._waiting, self._inbox.popleft(), by_priority=self.priority_scheduling)

    def _run_commands(self) -> None:
        self._drain_inbox()
        while self._cmds:
            self._drain_inbox()
            fn, fut = self._cmds.popleft()
            try:
                res = fn()
            except BaseException as err:  # noqa: BLE001 - handed back to the caller
                if fut is not None:
                    fut.set_exception(err)
                else:
                    log.error("engine command failed:\n%s", traceback.format_exc())
                continue
            if fut is not None:
                fut.set_result(res)

    def _update_counters(self) -> None:
        b = self._batch
        self._n_running = b.size if b is not None else 0
        self._n_waiting = len(self._waiting)
        self._n_tokens = sum(len(r.input_ids) + len(r.output_ids) for r in b.reqs) if b is not None else 0

    def _finish(self, reqs: list[GenerateRequest], reason_factory: Callable[[], FinishReason]) -> None:
        for r in reqs:
            r.weight_version = self.weight_version
            r.finish(reason_factory())
        self.notify(reqs)

    def _fail_all(self, message: str) -> None:
        reqs = list(self._waiting) + (self._batch.reqs if self._batch is not None else [])
        self._waiting.clear()
        self._batch = None
        self._reserved_tokens = 0
        self._finish(reqs, lambda: FinishReason.abort(message))
        self._update_counters()

    # commands ------------------------------------------------------------
    def _t_abort(self, rids: set[str] | None) -> int:
        hit_w = [r for r in self._waiting if rids is None or r.rid in rids]
        if hit_w:
            self._waiting = deque(r for r in self._waiting if not (rids is None or r.rid in rids))
        hit_r: list[int] = []
        if self._batch is not None:
            hit_r = [i for i, r in enumerate(self._batch.reqs) if rids is None or r.rid in rids]
        reqs = hit_w + [self._batch.reqs[i] for i in hit_r] if hit_r else hit_w
        if hit_r:
            self._drop_rows(set(hit_r))
        self._finish(reqs, FinishReason.abort)
        self._update_counters()
        return len(reqs)

    def _t_pause(self, mode: str) -> int:
        self._thread_paused = True
        held = (self._batch.size if self._batch is not None else 0) + len(self._waiting)
        if mode == "retract" and self._batch is not None:
            # Back to the head of the queue, KV dropped; re-prefilled from prompt + output.
            for r in reversed(self._batch.reqs):
                r.num_retractions += 1
                enqueue(self._waiting, r, by_priority=self.priority_scheduling, front=True)
            self._batch = None
            self._params = None
            self._reserved_tokens = 0
            self._update_counters()
        return held

    def _t_resume(self) -> None:
        self._thread_paused = False

    def _t_flush(self) -> tuple[bool, str]:
        running = self._batch.size if self._batch is not None else 0
        queued = sum(1 for r in self._waiting if r.num_retractions == 0)
        if running or queued:
            return False, (f"Cache not flushed: {running} running and {queued} waiting request(s) hold or "
                           "need the KV cache (pause with mode='retract' or 'abort' first).")
        return True, "Cache flushed."

    def _t_swap(self, tensors: dict[str, torch.Tensor]) -> None:
        """Copy new weights in place between two steps (tied parameters are written once)."""
        live = dict(self.model.named_parameters())
        live.update(dict(self.model.named_buffers()))
        with torch.no_grad():
            for name, t in tensors.items():
                live[name].copy_(t)

    # admission + prefill ------------------------------------------------
    def _admit(self) -> bool:
        if not self._waiting:
            return False
        running = self._batch.size if self._batch is not None else 0
        new: list[GenerateRequest] = []
        longest = 0
        while self._waiting and running + len(new) < self.max_running_requests:
            r = self._waiting[0]
            ctx = len(r.input_ids) + len(r.output_ids)
            need = len(r.input_ids) + r.sampling.max_new_tokens
            if (running or new) and self._reserved_tokens + need > self.max_total_tokens:
                break
            if new and max(longest, ctx) * (len(new) + 1) > MAX_PREFILL_TOKENS:
                break
            # Prompt logprobs materialise [prompt_len, vocab] logits: such a request prefills alone.
            if new and (self._wants_prompt_logprobs(r) or self._wants_prompt_logprobs(new[0])):
                break
            self._waiting.popleft()
            if r.finish_reason is not None:
                continue
            new.append(r)
            longest = max(longest, ctx)
            self._reserved_tokens += need
        if new:
            try:
                self._prefill(new)
            except Exception:
                # They left the queue but never joined the batch: finish them here, or their callers hang.
                self._finish([r for r in new if r.finish_reason is None],
                             lambda: FinishReason.abort("engine error during prefill"))
                for r in new:
                    self._reserved_tokens -= len(r.input_ids) + r.sampling.max_new_tokens
                raise
            self._stats["prefill_batches"] += 1
            self._stats["prefill_requests"] += len(new)
            self._update_counters()
        return bool(new)

    @staticmethod
    def _wants_prompt_logprobs(r: GenerateRequest) -> bool:
        return r.return_logprob and r.logprob_start_len >= 0 and r.input_token_logprobs is None

    def _prefill(self, reqs: list[GenerateRequest]) -> None:
        dev = self.device
        seqs = [r.input_ids + r.output_ids for r in reqs]
        L = max(len(s) for s in seqs)
        B = len(reqs)
        ids = torch.full((B, L), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, L), dtype=torch.bool)
        for i, s in enumerate(seqs):
            ids[i, L - len(s):] = torch.tensor(s, dtype=torch.long)
            mask[i, L - len(s):] = True
        ids, mask = ids.to(dev), mask.to(dev)
        pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)
        want_input_lp = [self._wants_prompt_logprobs(r) for r in reqs]
        cache = new_cache(self.num_layers)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True,
                         logits_to_keep=0 if any(want_input_lp) else 1)
        logits = out.logits
        fresh = self._make_batch(reqs, cache, mask, pos[:, -1] + 1)
        if any(want_input_lp):
            self._input_logprobs(reqs, want_input_lp, seqs, logits, fresh, L)
        self._batch = fresh if self._batch is None else self._merge(self._batch, fresh)
        self._params = self._row_params(self._batch)
        # The prefill's last position predicts each new row's next token.
        params = self._row_params(fresh)
        tok, lp, top = self._sample(logits[:, -1, :], fresh, params)
        b = self._batch
        b.last_tok[b.size - B:] = tok
        self._commit(list(range(b.size - B, b.size)), tok, lp, top)

    def _input_logprobs(self, reqs: list[GenerateRequest], want: list[bool], seqs: list[list[int]],
                        logits: torch.Tensor, rows: _Batch, L: int) -> None:
        scaled = logits.float() / rows.temp[:, None, None]
        logp = torch.log_softmax(scaled, dim=-1)
        for i, r in enumerate(reqs):
            if not want[i]:
                continue
            n = len(seqs[i])
            off = L - n
            # logp[off + j - 1] predicts token j of the sequence (j >= 1); token 0 has no logprob.
            tgt = torch.tensor(seqs[i][1:], dtype=torch.long, device=logp.device)
            vals = logp[i, off:off + n - 1].gather(-1, tgt[:, None]).squeeze(-1).tolist() if n > 1 else []
            start = max(r.logprob_start_len, 0)
            full: list[float | None] = [None] + vals
            r.input_token_logprobs = full[start:len(r.input_ids)]
            if r.top_logprobs_num > 0:
                tv, ti = logp[i, off:off + n - 1].topk(r.top_logprobs_num, dim=-1)
                tops: list[list[tuple[float, int]] | None] = [None] + [
                    list(zip(v, t)) for v, t in zip(tv.tolist(), ti.tolist())]
                r.input_top_logprobs = tops[start:len(r.input_ids)]

    def _make_batch(self, reqs: list[GenerateRequest], cache: Any, mask: torch.Tensor,
                    next_pos: torch.Tensor) -> _Batch:
        dev = self.device
        V = self.logits_vocab
        temps = [r.sampling.temperature for r in reqs]
        greedy = [r.sampling.greedy for r in reqs]
        B, L = mask.shape
        mbuf = torch.zeros((B, L + KV_GROW), dtype=torch.bool, device=dev)
        mbuf[:, :L] = mask
        return _Batch(
            reqs=list(reqs), cache=cache, mask=mbuf, next_pos=next_pos.clone(),
            last_tok=torch.zeros(B, dtype=torch.long, device=dev),
            temp=torch.tensor([1.0 if g else t for t, g in zip(temps, greedy)], dtype=torch.float32, device=dev),
            greedy=torch.tensor(greedy, dtype=torch.bool, device=dev),
            top_p=torch.tensor([r.sampling.top_p for r in reqs], dtype=torch.float32, device=dev),
            top_k=torch.tensor([V if r.sampling.top_k < 0 else min(r.sampling.top_k, V) for r in reqs],
                               dtype=torch.long, device=dev),
            min_p=torch.tensor([r.sampling.min_p for r in reqs], dtype=torch.float32, device=dev),
        )

    def _merge(self, a: _Batch, b: _Batch) -> _Batch:
        ta, tb = a.length, b.length
        t = max(ta, tb)
        layers = [SlabLayer.merge(la, lb) for la, lb in zip(a.cache.layers, b.cache.layers)]
        cache = Cache(layers=layers)
        cap = layers[0].kbuf.shape[2]
        mask = torch.zeros((a.size + b.size, cap), dtype=torch.bool, device=self.device)
        mask[:a.size, t - ta:t] = a.mask[:, :ta]
        mask[a.size:, t - tb:t] = b.mask[:, :tb]
        cat = torch.cat
        return _Batch(
            reqs=a.reqs + b.reqs, cache=cache, mask=mask, next_pos=cat([a.next_pos, b.next_pos]),
            last_tok=cat([a.last_tok, b.last_tok]), temp=cat([a.temp, b.temp]), greedy=cat([a.greedy, b.greedy]),
            top_p=cat([a.top_p, b.top_p]), top_k=cat([a.top_k, b.top_k]), min_p=cat([a.min_p, b.min_p]))

    def _row_params(self, b: _Batch) -> _RowParams:
        s = [r.sampling for r in b.reqs]
        greedy = [p.greedy for p in s]
        temps = {p.temperature for p, g in zip(s, greedy) if not g}
        V = self.logits_vocab
        return _RowParams(
            all_greedy=all(greedy), any_greedy=any(greedy),
            uniform_temp=temps.pop() if len(temps) == 1 else None,
            need_filter=any(not g and (p.top_p < 1.0 or 0 < p.top_k < V or p.min_p > 0.0) for p, g in zip(s, greedy)),
            top_n=max((r.top_logprobs_num for r in b.reqs if r.return_logprob), default=0),
        )

    # decode ---------------------------------------------------------------
    def _decode_step(self) -> None:
        b = self._batch
        assert b is not None and self._params is not None
        t = b.length
        if t + 1 > b.mask.shape[1]:
            grown = torch.zeros((b.size, t + 1 + KV_GROW), dtype=torch.bool, device=self.device)
            grown[:, :t] = b.mask[:, :t]
            b.mask = grown
        b.mask[:, t] = True
        mask = b.mask[:, None, None, :t + 1] if self._direct_mask else b.mask[:, :t + 1]
        out = self.model(input_ids=b.last_tok[:, None], attention_mask=mask,
                         position_ids=b.next_pos[:, None], cache=b.cache, use_cache=True)
        b.next_pos += 1
        tok, lp, top = self._sample(out.logits[:, -1, :], b, self._params)
        b.last_tok = tok
        self._max_batch_seen = max(self._max_batch_seen, b.size)
        self._commit(list(range(b.size)), tok, lp, top)

    def _sample(self, logits: torch.Tensor, b: _Batch, p: _RowParams
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """Per-row sampling, vectorised. Returns (tokens, logprobs, top-k (values, ids) or None)."""
        logits = logits.float()
        if p.all_greedy:
            logp = torch.log_softmax(logits, dim=-1)
            tok = logits.argmax(dim=-1)
        else:
            if p.uniform_temp is not None and not p.any_greedy:
                scaled = logits if p.uniform_temp == 1.0 else logits / p.uniform_temp
            else:
                scaled = logits / b.temp[:, None]
            logp = torch.log_softmax(scaled, dim=-1)
            probs = logp.exp()
            if p.need_filter:
                probs = self._filter(probs, b)
            # Exponential race: argmax(p / E) with E = -log U ~ Exp(1) samples from p, with no
            # host sync (and U -> -log U is ~3x cheaper than Tensor.exponential_ on CPU).
            noise = torch.rand(probs.shape, generator=self.generator, device=probs.device).log_().neg_()
            tok = (probs / noise).argmax(dim=-1)
            if p.any_greedy:
                tok = torch.where(b.greedy, logits.argmax(dim=-1), tok)
        lp = logp.gather(-1, tok[:, None]).squeeze(-1)
        top = None
        if p.top_n > 0:
            top = logp.topk(p.top_n, dim=-1)
        return tok, lp, top

    @staticmethod
    def _filter(probs: torch.Tensor, b: _Batch) -> torch.Tensor:
        """Zero out tokens excluded by each row's top_k, top_p and min_p (greedy rows are overridden later)."""
        sp, si = probs.sort(dim=-1, descending=True)
        ranks = torch.arange(sp.shape[-1], device=sp.device)[None, :]
        drop = ranks >= b.top_k[:, None]
        cum = sp.cumsum(dim=-1)
        drop |= (cum - sp) > b.top_p[:, None]          # keep the smallest prefix reaching top_p
        drop |= sp < (b.min_p * sp[:, 0])[:, None]
        drop[:, 0] = False                               # always keep the most likely token
        sp = sp.masked_fill(drop, 0.0)
        return torch.zeros_like(probs).scatter_(-1, si, sp)

    def _commit(self, rows: list[int], tok: torch.Tensor, lp: torch.Tensor,
                top: Any) -> None:
        """Hand sampled tokens to their requests (one device->host copy), drop finished rows."""
        b = self._batch
        assert b is not None
        # One device->host transfer for both (token ids are exact in float64).
        toks_f, lps = torch.stack([tok.double(), lp.double()]).tolist()
        toks = [int(t) for t in toks_f]
        if top is not None:
            tv, ti = top.values.tolist(), top.indices.tolist()
        ver = self.weight_version
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
        self.notify(touched)
        if done:
            self._drop_rows(done)
        self._update_counters()

    def _drop_rows(self, drop: set[int]) -> None:
        b = self._batch
        assert b is not None
        for i in drop:
            r = b.reqs[i]
            self._reserved_tokens -= len(r.input_ids) + r.sampling.max_new_tokens
        keep = [i for i in range(b.size) if i not in drop]
        if not keep:
            self._batch = None
            self._params = None
            self._reserved_tokens = 0
            return
        idx = torch.tensor(keep, dtype=torch.long, device=self.device)
        for layer in b.cache.layers:
            layer.select_rows(idx)
        b.reqs = [b.reqs[i] for i in keep]
        for name in ("mask", "next_pos", "last_tok", "temp", "greedy", "top_p", "top_k", "min_p"):
            setattr(b, name, getattr(b, name).index_select(0, idx))
        self._params = self._row_params(b)
        self._maybe_trim(b)

    def _maybe_trim(self, b: _Batch) -> None:
        """Drop leading columns that are padding for every remaining row."""
        t = b.length
        if t < TRIM_MIN_COLS:
            return
        # The longest remaining row is the one with the largest next position.
        longest = int(b.next_pos.max())
        lead = t - longest
        if lead >= TRIM_MIN_COLS and lead * 4 >= t:
            for layer in b.cache.layers:
                layer.trim_left(lead)
            b.mask = b.mask[:, lead:].clone()
