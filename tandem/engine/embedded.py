"""The embedded engine: continuous batching over an HF causal LM (CPU or CUDA), in process.

One scheduler thread owns the model and the running batch (tandem.engine.batch_scheduler
says what each step does); the HTTP event loop only posts commands to it (submit, abort,
pause, resume, weight swap, flush) and is woken once per step. The thread runs posted
commands, then one scheduling step, and sleeps when there is nothing to do.

The parts: KV cache slabs (tandem.engine.kv_cache), batch surgery (tandem.engine.batch),
sampling and logprobs (tandem.engine.sampling), checkpoint reading (tandem.engine.weight_loading).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
import traceback
import zlib
from collections import deque
from typing import Any, Callable, Literal

import torch

from tandem.config.views import EngineView
from tandem.engine.backend import EngineBackend, LoadInfo, ServingCore
from tandem.engine.batch_scheduler import BatchScheduler
from tandem.engine.adapters import LoraLimits
from tandem.engine.core import EngineCore
from tandem.engine.lora_layers import LoraLayers, read_adapter
from tandem.engine.request import GenerateRequest
from tandem.lora import AdapterError
from tandem.engine.weight_loading import (WeightLoadError, allocate_parameters, copy_weights_in_place,
                                          free_parameters, read_weights, return_freed_memory)
from tandem.model_source import load_causal_lm, load_tokenizer, pick_device

log = logging.getLogger("tandem.engine.embedded")


class EmbeddedCore(EngineCore):
    """An EngineCore over an `EmbeddedBackend` that serves an HF causal LM."""

    def __init__(self, *, model: Any, tokenizer: Any, model_path: str, device: str = "cpu",
                 served_model_name: str | None = None, weight_version: str = "0",
                 max_running_requests: int = 64, max_total_tokens: int = 262144,
                 context_length: int | None = None, seed: int = 0, priority_scheduling: bool = False,
                 lora: LoraLimits | None = None, admission_window_s: float = 0.0):
        if context_length is None:
            context_length = getattr(model.config, "max_position_embeddings", None)
        pad = getattr(tokenizer, "pad_token_id", None)
        layers = LoraLayers(model, lora.target_modules) if lora is not None else None
        backend = EmbeddedBackend(BatchScheduler(
            model=model.eval(), device=torch.device(device), pad_id=int(pad) if pad is not None else 0, seed=seed,
            max_running_requests=max_running_requests, max_total_tokens=max_total_tokens,
            priority_scheduling=priority_scheduling, lora=layers), admission_window_s)
        super().__init__(backend, tokenizer=tokenizer, model_path=model_path, served_model_name=served_model_name,
                         weight_version=weight_version, max_running_requests=max_running_requests,
                         max_total_tokens=max_total_tokens, context_length=context_length, lora=lora)
        # Model-level eos ids (generation_config) count as eos too, as in SGLang.
        gen_eos = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
        if gen_eos is not None:
            extra = gen_eos if isinstance(gen_eos, (list, tuple)) else [gen_eos]
            self.eos_token_ids = self.eos_token_ids | frozenset(int(e) for e in extra)

    @classmethod
    def from_config(cls, cfg: EngineView, *, model_path: str, name: str = "engine") -> "EmbeddedCore":
        """Build from an engine's view of the run config (`python -m tandem.engine` calls this); `model_path` is
        `tandem.model_source.resolve_model_path(cfg)`. Initial weight_version is "0"."""
        return cls.load(
            model_path, device=pick_device(cfg.engine.embedded.device), dtype=cfg.model.dtype,
            trust_remote_code=cfg.model.trust_remote_code, served_model_name=cfg.model.path,
            max_running_requests=cfg.engine.max_running_requests, max_total_tokens=cfg.engine.max_total_tokens,
            priority_scheduling=cfg.engine.priority_scheduling, lora=LoraLimits.from_config(cfg),
            admission_window_s=cfg.engine.embedded.admission_window_ms / 1000,
            # Engines sample independently: same run seed, different stream per engine name.
            seed=cfg.run.seed * 1_000_003 + zlib.crc32(name.encode()))

    @classmethod
    def load(cls, model_path: str, *, device: str = "cpu", dtype: str = "float32",
             trust_remote_code: bool = False, **kw: Any) -> "EmbeddedCore":
        tok = load_tokenizer(model_path, trust_remote_code=trust_remote_code)
        model = load_causal_lm(model_path, dtype=dtype, device=device, trust_remote_code=trust_remote_code)
        return cls(model=model, tokenizer=tok, model_path=model_path, device=device, **kw)


class EmbeddedBackend(EngineBackend):
    """Runs a `BatchScheduler` on its own thread; every contract method posts to that thread."""

    name = "embedded"

    def __init__(self, scheduler: BatchScheduler, admission_window_s: float = 0.0):
        self.scheduler = scheduler
        self.admission_window_s = admission_window_s
        self.model = scheduler.model
        self.device = scheduler.device
        self._cmds: deque[tuple[Callable[[], Any], concurrent.futures.Future | None]] = deque()
        self._inbox: deque[GenerateRequest] = deque()   # appended by the loop, drained by the thread
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self.cpu_threads = torch.get_num_threads()
        """Torch threads the scheduler thread computes with (the process's count until /set_cpu_threads)."""
        self.freed_shapes: dict[str, tuple[int, ...]] | None = None
        """Released weights: each parameter's shape (its storage is gone); None while they are held."""
        self.weights_stale = False
        """Resumed weights whose storage holds no version yet (a load or restore_weights fills them)."""

    def attach(self, core: ServingCore) -> None:
        super().attach(core)
        self.scheduler.core = core

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="tandem-scheduler", daemon=True)
        self._thread.start()

    async def shutdown(self) -> None:
        self._stop = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10.0)

    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # ------------------------------------------------------------------ loop -> thread
    def _post(self, fn: Callable[[], Any], want_result: bool = True) -> concurrent.futures.Future | None:
        fut: concurrent.futures.Future | None = concurrent.futures.Future() if want_result else None
        self._cmds.append((fn, fut))
        self._wake.set()
        return fut

    async def _call(self, fn: Callable[[], Any]) -> Any:
        if not self.alive():
            raise RuntimeError("the engine's scheduler thread is not running")
        fut = self._post(fn)
        assert fut is not None
        return await asyncio.wrap_future(fut)

    def submit(self, req: GenerateRequest) -> None:
        self._inbox.append(req)
        self._wake.set()

    async def abort(self, rids: list[str] | None) -> int:
        return await self._call(lambda: self.scheduler.abort(None if rids is None else set(rids)))

    async def pause(self, mode: Literal["retract", "in_place"]) -> int:
        return await self._call(lambda: self.scheduler.pause(mode))

    async def resume(self) -> None:
        await self._call(self.scheduler.resume)

    async def flush_cache(self) -> tuple[bool, str]:
        return await self._call(self.scheduler.flush)

    async def release_memory(self, tags: list[str]) -> None:
        # The KV cache lives in the running batch's slabs, freed when the last request left it (the
        # core releases only an idle engine): releasing it only returns that memory to the system.
        def release() -> None:
            if "weights" in tags and self.freed_shapes is None:
                self.freed_shapes = free_parameters(self.model)
                self.weights_stale = False
            return_freed_memory(self.device)
        await self._call(release)

    async def resume_memory(self, tags: list[str]) -> None:
        def resume() -> None:
            if "weights" in tags and self.freed_shapes is not None:
                allocate_parameters(self.model, self.freed_shapes)
                self.freed_shapes, self.weights_stale = None, True
        await self._call(resume)

    async def restore_weights(self, model_path: str) -> None:
        if self.weights_stale:
            ok, msg = await self.load_weights(model_path, None)
            if not ok:
                raise RuntimeError(f"resumed weights could not be restored from {model_path}: {msg}")

    async def load_weights(self, model_path: str, load_format: str | None) -> tuple[bool, str]:
        if self.freed_shapes is not None:
            return False, ("Failed to update weights: they are released (/release_memory_occupation); resume them "
                           "first (/resume_memory_occupation with tags ['weights']). The engine holds no weights.")
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        try:
            # Reading and checking the files happens off the scheduler thread, so decoding
            # continues meanwhile; only the in-place copy below runs between two steps.
            tensors = await loop.run_in_executor(None, read_weights, self.model, model_path, load_format,
                                                 self.device)
            await self._call(lambda: copy_weights_in_place(self.model, tensors))
            self.weights_stale = False
        except WeightLoadError as err:
            return False, f"Failed to update weights from {model_path!r}: {err}. The old weights are kept."
        return True, f"Succeeded to update model weights in {time.perf_counter() - t0:.3f}s."

    async def load_lora(self, name: str, path: str, limits: LoraLimits) -> tuple[bool, str]:
        layers = self.scheduler.lora
        assert layers is not None, "load_lora on an engine started without LoRA"
        try:  # read and check off the scheduler thread; only the registration runs between two steps
            adapter = await asyncio.get_running_loop().run_in_executor(None, read_adapter, path, self.model, limits,
                                                                       self.device)
        except AdapterError as err:
            return False, str(err)
        await self._call(lambda: layers.add(name, adapter))
        return True, "Success"

    async def unload_lora(self, name: str) -> None:
        layers = self.scheduler.lora
        if layers is not None:
            await self._call(lambda: layers.remove(name))

    async def set_cpu_threads(self, threads: int) -> int:
        # On the scheduler thread: torch's thread count is per calling thread once it has computed.
        def apply() -> int:
            torch.set_num_threads(threads)
            return torch.get_num_threads()
        self.cpu_threads = await self._call(apply)
        return self.cpu_threads

    # ------------------------------------------------------------------ info
    def get_load(self) -> LoadInfo:
        s = self.scheduler
        return LoadInfo(
            num_running_reqs=s.n_running, num_waiting_reqs=s.n_waiting + len(self._inbox), num_tokens=s.n_tokens,
            max_running_requests=s.max_running_requests, max_total_tokens=s.max_total_tokens,
            max_running_batch_seen=s.max_batch_seen)

    def server_info(self) -> dict[str, Any]:
        return dict(device=str(self.device), dtype=str(next(self.model.parameters()).dtype).removeprefix("torch."),
                    torch_threads=self.cpu_threads, scheduler_stats=dict(self.scheduler.stats))

    def model_info(self) -> dict[str, Any]:
        cfg = self.model.config
        return dict(model_type=getattr(cfg, "model_type", None), architectures=getattr(cfg, "architectures", None))

    # ------------------------------------------------------------------ the scheduler thread
    def _run(self) -> None:
        torch.set_grad_enabled(False)
        while not self._stop:
            try:
                self._run_commands()
                if not self.scheduler.has_work():
                    self._wake.wait(0.5)  # every producer of work sets _wake; this is a safety net
                    self._wake.clear()
                    continue
                if self.scheduler.batch is None and self.admission_window_s > 0:
                    self._gather_burst()
                self.scheduler.step()
            except Exception:  # keep serving: fail the requests in flight, not the process
                log.error("scheduler step failed:\n%s", traceback.format_exc())
                self.scheduler.fail_all("engine error: " + traceback.format_exc(limit=1).strip().splitlines()[-1])
        self._drain_inbox()
        self.scheduler.fail_all("engine shutting down")

    def _gather_burst(self) -> None:
        """Idle, with work arriving: wait until no request has arrived for the admission window (at
        most _gather_limit_s, and not past a posted command), so a burst prefills as one batch. Rows
        that join a running batch later sit at other positions: the batch needs a padding mask,
        and SDPA's masked kernel made decode steps 15-20% slower (23M parameters, CPU)."""
        deadline = time.monotonic() + self._gather_limit_s()
        while not self._cmds and time.monotonic() < deadline:
            self._wake.clear()
            if not self._wake.wait(self.admission_window_s):
                break
        self._drain_inbox()

    def _gather_limit_s(self) -> float:
        """Ten windows, but never more than two decode steps (as measured so far): a request that
        joins a running batch late waits for the current step anyway, so the first ones should not
        wait much longer than that. With a small model (2 ms steps) ten windows were a third of a
        whole rollout."""
        stats = self.scheduler.stats
        limit = 10 * self.admission_window_s
        if stats["decode_steps"]:
            limit = min(limit, 2 * stats["decode_time_s"] / stats["decode_steps"])
        return limit

    def _drain_inbox(self) -> None:
        while self._inbox:
            self.scheduler.enqueue(self._inbox.popleft())

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


__all__ = ["EmbeddedBackend", "EmbeddedCore"]
