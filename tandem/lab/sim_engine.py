"""`engine.backend = "sim"`: an EngineCore whose timing follows a latency model of one SGLang
engine on one GPU, so the launcher, router, rollout code, staleness control and weight sync
all run for real while no model runs at all.

Timing comes from `tandem.lab.sim.scheduler.SimScheduler` (FIFO queue, KV-budget admission,
prefill-before-decode, continuous-batching decode, retraction, a block-level prefix cache,
weight reload), parametrized by an engine profile (`profiles/engine/*.toml`) and run
`time_scale` times faster than real time. The scheduler works in *model seconds*; this backend
maps them to the serving event loop's clock (model = loop_elapsed * time_scale: wall time on an
ordinary loop, simulated time on tandem.lab.sim.virtual_clock's), sleeps until the next event
(a prefill or decode run ends) with one loop timer, and only then materializes tokens, so
CPU cost is per request, not per token.

Tokens are plausible, not meaningful (tandem.lab.sim_engine_outputs draws them). Stop strings and
stop token ids behave as in SGLang because finishing goes through the shared
`GenerateRequest.append_token` rules.

`engine.sim.token_scale` k lets one wire token stand for k modelled tokens: the scheduler sees
k times the prompt and output lengths (so timing, KV and cache behave as for the full-size
requests) while HTTP carries k times fewer ids; the sim workload divides its lengths by the
same k. Token counts in responses are wire tokens.

Weight updates read every byte of the published safetensors (real disk I/O, so sync
benchmarks measure the real path) and then hold the GPU for the profile's `reload_s`.

Busy time (every modelled forward) is exposed in /v1/loads and /get_server_info (`sim` keys)
and written as busy spans (unix wall times) to `<run_dir>/sim/<engine name>.jsonl`, from which
`bench/scaling.py` computes each step's lower bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO

from tandem.config.views import EngineSide
from tandem.engine.backend import EngineBackend, LoadInfo
from tandem.engine.adapters import LoraLimits, check_adapter_files
from tandem.engine.core import EngineCore, running_on
from tandem.engine.queueing import priority
from tandem.engine.request import FinishReason, GenerateRequest
from tandem.lab.sim_engine_outputs import OutputPlan, OutputPlanner, fill_prompt_logprobs
from tandem.engine.weight_loading import read_safetensors_dir
from tandem.lab.sim.latency import LatencyModel
from tandem.lab.sim.profiles import EngineProfile, load_engine_profile
from tandem.lab.sim.scheduler import PrefixCache, SimReq, SimScheduler
from tandem.lab.sim.virtual_clock import unix_time
from tandem.model_source import load_tokenizer

STREAM_INTERVAL_S = 0.02
"""Wall seconds between token flushes to streaming clients while a decode run is in progress."""


@dataclass
class SimLoadInfo(LoadInfo):
    """/v1/loads entry plus the sim's counters (model seconds unless the name says wall)."""

    busy_s: float = 0.0
    prefill_s: float = 0.0
    decode_s: float = 0.0
    reload_s: float = 0.0
    model_time_s: float = 0.0
    time_scale: float = 1.0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    cached_tokens: int = 0
    retractions: int = 0
    lag_mean_s: float = 0.0
    lag_max_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        out["sim"] = {
            "busy_s": self.busy_s, "prefill_s": self.prefill_s, "decode_s": self.decode_s,
            "reload_s": self.reload_s, "model_time_s": self.model_time_s,
            "time_scale": self.time_scale, "generated_tokens": self.generated_tokens,
            "prefill_tokens": self.prefill_tokens, "cached_tokens": self.cached_tokens,
            "retractions": self.retractions, "lag_mean_s": self.lag_mean_s, "lag_max_s": self.lag_max_s,
        }
        return out


class SimEngineCore(EngineCore):
    """An EngineCore over a `SimBackend`; client-facing limits are in wire tokens."""

    def __init__(self, *, tokenizer: Any, model_path: str, profile: EngineProfile, time_scale: float = 1.0,
                 seed: int = 0, name: str = "sim", trace_path: str | os.PathLike | None = None,
                 served_model_name: str | None = None, weight_version: str = "0", token_scale: int = 1,
                 priority_scheduling: bool = False, lora: LoraLimits | None = None):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        if token_scale < 1:
            raise ValueError(f"token_scale must be >= 1, got {token_scale}")
        cap = profile.capacity
        k = int(token_scale)
        planner = OutputPlanner(tokenizer, len(tokenizer), profile.outputs, random.Random(f"{seed}:{name}"))
        backend = SimBackend(profile, planner, time_scale=float(time_scale), token_scale=k, name=name,
                             trace_path=trace_path, priority_scheduling=priority_scheduling)
        super().__init__(backend, tokenizer=tokenizer, model_path=model_path, served_model_name=served_model_name,
                         weight_version=weight_version, max_running_requests=cap.max_running_requests,
                         max_total_tokens=cap.max_total_tokens // k, context_length=cap.context_length // k,
                         lora=lora)

    @classmethod
    def from_config(cls, cfg: EngineSide, *, model_path: str, name: str = "sim", tokenizer: Any = None,
                    weight_version: str = "0") -> "SimEngineCore":
        """Build from the run config: engine.sim.profile, engine.sim.time_scale, run.seed, run.run_dir.

        engine.max_running_requests / max_total_tokens are not used: they describe the CPU
        engine, while the profile describes the modelled GPU's capacity.
        """
        if tokenizer is None:
            tokenizer = load_tokenizer(model_path, cfg.model.trust_remote_code)
        profile = load_engine_profile(cfg.engine.sim.profile)
        trace = Path(cfg.run.run_dir) / "sim" / f"{name}.jsonl"
        return cls(tokenizer=tokenizer, model_path=model_path, profile=profile,
                   time_scale=cfg.engine.sim.time_scale, seed=cfg.run.seed, name=name, trace_path=trace,
                   served_model_name=cfg.model.path, weight_version=weight_version,
                   token_scale=cfg.engine.sim.token_scale, priority_scheduling=cfg.engine.priority_scheduling,
                   lora=LoraLimits.from_config(cfg))


class SimBackend(EngineBackend):
    """Requests run on a `SimScheduler` in model time; tokens materialize when their run ends."""

    name = "sim"

    def __init__(self, profile: EngineProfile, planner: OutputPlanner, *, time_scale: float, token_scale: int,
                 name: str, trace_path: str | os.PathLike | None, priority_scheduling: bool):
        self.profile = profile
        self.planner = planner
        self.engine_name = name
        self.time_scale = time_scale
        self.k = token_scale
        self.latency = LatencyModel.from_profile(profile)
        self._wire_block = max(1, profile.prefix_cache.block_tokens // self.k)
        self.sched = SimScheduler(self.latency, profile.capacity,
                                  PrefixCache(self._wire_block * self.k, profile.prefix_cache.enabled),
                                  priority_scheduling=priority_scheduling)
        # Model time runs on the serving loop's clock (monotonic on an ordinary loop, simulated on
        # tandem.lab.sim.virtual_clock's), started with the core; trace times are that clock in unix seconds.
        self._t0: float | None = None
        self._t0_unix = 0.0
        self._sim: dict[str, SimReq] = {}
        self._plans: dict[str, OutputPlan] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._trace_path = Path(trace_path) if trace_path is not None else None
        self._trace: TextIO | None = None
        self.last_reload: dict[str, float] = {}
        # How late the loop woke for modelled events (wall s): the sim's own health check. A
        # CPU-starved machine shows up here, and as idle model time, not as wrong numbers.
        self._timer_due: float | None = None
        self.lag_sum = self.lag_max = 0.0
        self.lag_n = 0

    # ------------------------------------------------------------------ clock
    def _loop(self) -> asyncio.AbstractEventLoop:
        core = getattr(self, "core", None)
        return core.loop if core is not None and core.loop is not None else asyncio.get_running_loop()

    def _start_clock(self) -> None:
        loop = self._loop()
        self._t0, self._t0_unix = loop.time(), unix_time(loop)

    def model_now(self) -> float:
        """Model seconds since the engine started."""
        if self._t0 is None:
            self._start_clock()
        assert self._t0 is not None  # set by _start_clock
        return (self._loop().time() - self._t0) * self.time_scale

    def _to_unix(self, model_t: float) -> float:
        return self._t0_unix + model_t / self.time_scale

    # ------------------------------------------------------------------ lifecycle
    async def start(self) -> None:
        self._start_clock()
        if self._trace_path is not None:
            self._trace_path.parent.mkdir(parents=True, exist_ok=True)
            self._trace = open(self._trace_path, "a", buffering=1)
            self._write_trace({"type": "start", "t": self._t0_unix, "time_scale": self.time_scale,
                               "profile": self.profile.name, "engine": self.engine_name})

    async def shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.sched.advance(self.model_now())
        self._flush_spans(close_open=True)
        if self._trace is not None:
            self._write_trace({"type": "final", "t": unix_time(self._loop()), **self.get_load().to_json()["sim"]})
            self._trace.close()
            self._trace = None

    # ------------------------------------------------------------------ the event pump
    def _on_timer(self) -> None:
        due = self._timer_due
        if due is not None:
            lag = max(0.0, (self.model_now() - due) / self.time_scale)
            self.lag_sum += lag
            self.lag_max = max(self.lag_max, lag)
            self.lag_n += 1
        self._pump(due)

    def _pump(self, due: float | None = None) -> None:
        """Catch the model up to now, deliver finished requests, and arm the timer for the next event."""
        # The pending timer (if this pump is not it) is cancelled by _arm: dropping it here instead
        # would leave it live, and every /v1/loads would add one more timer firing at every event.
        self._timer_due = None
        now = self.model_now()
        if due is not None:
            # The timer fired for the event due at `due`: a clock a rounding error short of it (a
            # virtual clock lands exactly on the timer; asyncio may fire a clock-resolution early)
            # must still run that event, or the pump re-arms for ~0 s over and over.
            now = max(now, due)
        self._deliver(self.sched.advance(now))
        self._stream(now)
        self._flush_spans()
        self._arm(now)

    def _arm(self, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        loop = self.core.loop
        if loop is None:
            return
        due = self.sched.next_event_time()
        delay = None if due is None else max(0.0, (due - now) / self.time_scale)
        if any(r.stream for r in self.sched.running) and (delay is None or delay > STREAM_INTERVAL_S):
            delay, due = STREAM_INTERVAL_S, now + STREAM_INTERVAL_S * self.time_scale
        if delay is not None:
            self._timer = loop.call_later(delay, self._on_timer)
        self._timer_due = due

    def _after(self, finished: list[SimReq]) -> None:
        """Common tail of every client operation: deliver, then re-arm the timer."""
        self._deliver(finished)
        self._flush_spans()
        self._arm(self.model_now())

    # ------------------------------------------------------------------ tokens
    def _materialize(self, sreq: SimReq, upto: int) -> None:
        """Commit planned tokens up to `upto` modelled tokens (upto // token_scale wire tokens)
        to the request, through the shared finish rules."""
        req: GenerateRequest = sreq.payload
        plan = self._plans.get(sreq.rid)
        if plan is None or req.finish_reason is not None:
            return
        upto = min(upto // self.k, len(plan.ids))
        want_top = req.top_logprobs_num > 0
        version = self.core.weight_version
        for i in range(len(req.output_ids), upto):
            top = self.planner.top_logprobs(plan, i, req.top_logprobs_num) if want_top else None
            if req.append_token(plan.ids[i], plan.logprobs[i], version, top) is not None:
                break

    def _deliver(self, finished: list[SimReq]) -> None:
        if not finished:
            return
        reqs = []
        for sreq in finished:
            req: GenerateRequest = sreq.payload
            self._materialize(sreq, sreq.done)
            if sreq.state == "finished":
                if req.finish_reason is None:  # defensive: the plan always ends in a finish rule
                    req.finish(FinishReason("length", length=len(req.output_ids)))
                req.cached_tokens = sreq.cached_tokens // self.k
                if self.sched.cache.enabled:
                    self.sched.cache_insert(PrefixCache.block_hashes(req.input_ids + req.output_ids,
                                                                     self._wire_block))
            else:  # aborted
                req.finish(FinishReason.abort())
            self._sim.pop(sreq.rid, None)
            self._plans.pop(sreq.rid, None)
            reqs.append(req)
        self.core.notify(reqs)

    def _stream(self, now: float) -> None:
        """Hand streaming clients the tokens decoded so far (SGLang streams every step)."""
        progress = self.sched.progress(now)
        woken = []
        for sreq in self.sched.running:
            if not sreq.stream:
                continue
            n = progress.get(sreq, sreq.done)
            if n // self.k > len(sreq.payload.output_ids):
                self._materialize(sreq, n)
                woken.append(sreq.payload)
        self.core.notify(woken)

    # ------------------------------------------------------------------ EngineBackend
    def submit(self, req: GenerateRequest) -> None:
        target, plan = self.planner.plan(req)
        fill_prompt_logprobs(req, plan.rng)
        k = self.k
        sreq = SimReq(rid=req.rid, input_len=len(req.input_ids) * k, max_new_tokens=req.sampling.max_new_tokens * k,
                      target=max(1, target) * k,
                      input_blocks=PrefixCache.block_hashes(req.input_ids, self._wire_block)
                      if self.sched.cache.enabled else [],
                      payload=req, stream=req.stream, priority=priority(req))
        self._sim[req.rid] = sreq
        self._plans[req.rid] = plan
        self._after(self.sched.submit(sreq, self.model_now()))

    async def abort(self, rids: list[str] | None) -> int:
        targets = list(self._sim.values()) if rids is None else [self._sim[r] for r in rids if r in self._sim]
        finished: list[SimReq] = []
        now = self.model_now()
        for sreq in targets:
            finished += self.sched.abort(sreq, now)
        aborted = [s for s in targets if s.state == "aborted"]
        self._after(finished + [s for s in aborted if s not in finished])
        return len(aborted)

    async def pause(self, mode: Literal["retract", "in_place"]) -> int:
        affected, finished = self.sched.pause(mode, self.model_now())
        for sreq in affected:
            self._materialize(sreq, sreq.done)   # what was generated before the pause is kept
            if mode == "retract":
                sreq.payload.num_retractions += 1
        self._after(finished)
        return len(affected)

    async def resume(self) -> None:
        self._after(self.sched.resume(self.model_now()))

    async def flush_cache(self) -> tuple[bool, str]:
        self._pump()
        if self.sched.flush_cache():
            return True, "Cache flushed."
        return False, "Cache not flushed: there are running requests."

    async def load_weights(self, model_path: str, load_format: str | None) -> tuple[bool, str]:
        t0 = time.perf_counter()
        try:
            nbytes, nfiles = await asyncio.to_thread(read_safetensors_dir, model_path)
        except (OSError, ValueError) as err:
            return False, f"Failed to load weights from {model_path}: {err}"
        io_s = time.perf_counter() - t0
        # Tokens generated so far were produced by the old weights: commit them under the old version.
        now = self.model_now()
        self._deliver(self.sched.advance(now))
        for sreq, n in self.sched.progress(now).items():
            self._materialize(sreq, n)
        done = asyncio.Event()
        self._after(self.sched.request_reload(self.latency.reload_s, now, on_done=done.set))
        await done.wait()
        self.last_reload = {"bytes": nbytes, "files": nfiles, "io_s": io_s,
                            "model_reload_s": self.latency.reload_s, "wall_s": time.perf_counter() - t0}
        return True, (f"Succeeded to update model weights: read {nfiles} file(s), {nbytes / 1e9:.3f} GB in "
                      f"{io_s:.2f}s; modelled GPU reload {self.latency.reload_s:.1f}s.")

    async def load_lora(self, name: str, path: str, limits: LoraLimits) -> tuple[bool, str]:
        """No adapter compute is modelled (the profile is the base model's); the files are checked as any engine's."""
        return await check_adapter_files(path, limits)

    def get_load(self) -> SimLoadInfo:
        loop = self.core.loop
        if loop is not None and running_on(loop):
            self._pump()
        s = self.sched
        running = s.running + s.prefilling
        return SimLoadInfo(
            num_running_reqs=len(running), num_waiting_reqs=len(s.waiting),
            num_tokens=sum(r.context for r in running), max_running_requests=self.profile.capacity.max_running_requests,
            max_total_tokens=self.profile.capacity.max_total_tokens, max_running_batch_seen=s.max_batch_seen,
            busy_s=s.busy_until(self.model_now()) - s.reload_busy_s, prefill_s=s.prefill_busy_s,
            decode_s=s.decode_busy_s, reload_s=s.reload_busy_s,
            model_time_s=self.model_now(), time_scale=self.time_scale, generated_tokens=s.generated_tokens,
            prefill_tokens=s.prefill_token_count, cached_tokens=s.cached_token_count, retractions=s.retractions,
            lag_mean_s=self.lag_sum / max(self.lag_n, 1), lag_max_s=self.lag_max,
        )

    def server_info(self) -> dict[str, Any]:
        return {"sim": {**self.get_load().to_json()["sim"], "profile": self.profile.name, "token_scale": self.k,
                        "decode_step_ms_b1": self.latency.decode_step_s(1, 0) * 1e3,
                        "last_reload": self.last_reload}}

    # ------------------------------------------------------------------ trace
    def _flush_spans(self, close_open: bool = False) -> None:
        spans = self.sched.pop_spans(close_open)
        if self._trace is None or not spans:
            return
        for sp in spans:
            self._write_trace({"type": "span", "start": self._to_unix(sp.start), "end": self._to_unix(sp.end),
                               "busy_s": sp.busy_s, "reload_s": sp.reload_s})

    def _write_trace(self, row: dict[str, Any]) -> None:
        if self._trace is not None:
            self._trace.write(json.dumps(row) + "\n")


__all__ = ["STREAM_INTERVAL_S", "SimBackend", "SimEngineCore", "SimLoadInfo"]
