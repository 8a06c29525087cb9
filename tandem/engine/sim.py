"""`engine.backend = "sim"`: an EngineCore whose timing follows a latency model of one SGLang
engine on one GPU, so the launcher, router, rollout code, staleness control and weight sync
all run for real while no model runs at all.

Timing comes from `tandem.sim.scheduler.SimScheduler` (FIFO queue, KV-budget admission,
prefill-before-decode, continuous-batching decode, retraction, a block-level prefix cache,
weight reload), parametrized by an engine profile (`profiles/engine/*.toml`) and run
`time_scale` times faster than real time. The scheduler works in *model seconds*; this core
maps them to wall time (model = wall_elapsed * time_scale), sleeps until the next event
(a prefill or decode run ends) with one loop timer, and only then materializes tokens, so
CPU cost is per request, not per token.

Tokens are plausible, not meaningful: ids drawn from the tokenizer's printable tokens,
logprobs from an exponential (greedy requests are deterministic in the prompt and have
logprobs near 0). When the client fixes the length (`ignore_eos`) the request runs exactly
`max_new_tokens`; otherwise it stops with EOS after a geometric length (profile
`outputs.natural_mean_tokens`). Stop strings and stop token ids behave as in SGLang because
finishing goes through the shared `GenerateRequest.append_token` rules.

`engine.sim.token_scale` k lets one wire token stand for k modelled tokens: the scheduler sees
k times the prompt and output lengths (so timing, KV and cache behave as for the full-size
requests) while HTTP carries k times fewer ids; the sim workload divides its lengths by the
same k. Token counts in responses are wire tokens.

Weight updates read every byte of the published safetensors (real disk I/O, so sync
benchmarks measure the real path) and then hold the GPU for the profile's `reload_s`.

Busy time (every modelled forward) is exposed in /get_load and /get_server_info (`sim` keys)
and written as busy spans (unix wall times) to `<run_dir>/sim/<engine name>.jsonl`, from which
`bench/scaling.py` computes each step's lower bound.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import random
import string
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tandem.engine.core import EngineCore, FinishReason, GenerateRequest, LoadInfo
from tandem.engine.queueing import priority
from tandem.sim.latency import LatencyModel
from tandem.sim.profiles import EngineProfile, load_engine_profile
from tandem.sim.scheduler import PrefixCache, SimReq, SimScheduler

STREAM_INTERVAL_S = 0.02
"""Wall seconds between token flushes to streaming clients while a decode run is in progress."""
_PRINTABLE = set(string.ascii_letters + string.digits + string.punctuation + " ")
_READ_CHUNK = 16 << 20


@dataclass
class _OutputPlan:
    """The tokens a request will produce, drawn at submit time (so stop rules can be pre-checked)."""

    ids: list[int]
    logprobs: list[float]
    rng: random.Random
    top: list[list[tuple[float, int]]] = field(default_factory=list)


@dataclass
class SimLoadInfo(LoadInfo):
    """/get_load entry plus the sim's counters (model seconds unless the name says wall)."""

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
    backend = "sim"

    def __init__(self, *, tokenizer: Any, model_path: str, profile: EngineProfile, time_scale: float = 1.0,
                 seed: int = 0, name: str = "sim", trace_path: str | os.PathLike | None = None,
                 served_model_name: str | None = None, weight_version: str = "0", token_scale: int = 1,
                 priority_scheduling: bool = False):
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        if token_scale < 1:
            raise ValueError(f"token_scale must be >= 1, got {token_scale}")
        cap = profile.capacity
        self.k = int(token_scale)
        # Client-facing limits are in wire tokens; the scheduler works in modelled tokens.
        super().__init__(tokenizer=tokenizer, model_path=model_path, served_model_name=served_model_name,
                         weight_version=weight_version, max_running_requests=cap.max_running_requests,
                         max_total_tokens=cap.max_total_tokens // self.k, context_length=cap.context_length // self.k,
                         priority_scheduling=priority_scheduling)
        self.profile = profile
        self.name = name
        self.time_scale = float(time_scale)
        self.latency = LatencyModel.from_profile(profile)
        self._wire_block = max(1, profile.prefix_cache.block_tokens // self.k)
        self.sched = SimScheduler(self.latency, cap,
                                  PrefixCache(self._wire_block * self.k, profile.prefix_cache.enabled),
                                  priority_scheduling=priority_scheduling)
        self._rng = random.Random(f"{seed}:{name}")
        self._t0 = time.perf_counter()
        self._t0_unix = time.time()
        self._sim: dict[str, SimReq] = {}
        self._plans: dict[str, _OutputPlan] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._token_pool = self._printable_ids()
        self._trace_path = Path(trace_path) if trace_path is not None else None
        self._trace = None
        self.last_reload: dict[str, float] = {}
        # How late the loop woke for modelled events (wall s): the sim's own health check. A
        # CPU-starved machine shows up here, and as idle model time, not as wrong numbers.
        self._timer_due: float | None = None
        self.lag_sum = self.lag_max = 0.0
        self.lag_n = 0

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_config(cls, cfg: Any, *, model_path: str, name: str = "sim", tokenizer: Any = None,
                    weight_version: str = "0") -> "SimEngineCore":
        """Build from the run config: engine.sim.profile, engine.sim.time_scale, run.seed, run.run_dir.

        engine.max_running_requests / max_total_tokens are not used: they describe the CPU
        engine, while the profile describes the modelled GPU's capacity.
        """
        if tokenizer is None:
            from tandem.model_source import load_tokenizer

            tokenizer = load_tokenizer(model_path, cfg.model.trust_remote_code)
        profile = load_engine_profile(cfg.engine.sim.profile)
        trace = Path(cfg.run.run_dir) / "sim" / f"{name}.jsonl"
        return cls(tokenizer=tokenizer, model_path=model_path, profile=profile,
                   time_scale=cfg.engine.sim.time_scale, seed=cfg.run.seed, name=name, trace_path=trace,
                   served_model_name=cfg.model.path, weight_version=weight_version,
                   token_scale=cfg.engine.sim.token_scale, priority_scheduling=cfg.engine.priority_scheduling)

    def _printable_ids(self) -> list[int]:
        """Token ids that decode to printable ASCII, so responses look like text."""
        special = set(getattr(self.tokenizer, "all_special_ids", []) or [])
        pool = []
        for i in range(min(self.vocab_size, 4096)):
            if i in special:
                continue
            s = self.tokenizer.decode([i])
            if s and all(c in _PRINTABLE for c in s):
                pool.append(i)
        return pool or [i for i in range(self.vocab_size) if i not in special]

    # ------------------------------------------------------------------ clock
    def model_now(self) -> float:
        """Model seconds since the engine started."""
        return (time.perf_counter() - self._t0) * self.time_scale

    def _to_unix(self, model_t: float) -> float:
        return self._t0_unix + model_t / self.time_scale

    # ------------------------------------------------------------------ lifecycle
    async def _start(self) -> None:
        if self._trace_path is not None:
            self._trace_path.parent.mkdir(parents=True, exist_ok=True)
            self._trace = open(self._trace_path, "a", buffering=1)
            self._write_trace({"type": "start", "t": self._t0_unix, "time_scale": self.time_scale,
                               "profile": self.profile.name, "engine": self.name})

    async def _shutdown(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.sched.advance(self.model_now())
        self._flush_spans(close_open=True)
        if self._trace is not None:
            self._write_trace({"type": "final", "t": time.time(), **self.get_load().to_json()["sim"]})
            self._trace.close()
            self._trace = None

    # ------------------------------------------------------------------ the event pump
    def _on_timer(self) -> None:
        if self._timer_due is not None:
            lag = max(0.0, (self.model_now() - self._timer_due) / self.time_scale)
            self.lag_sum += lag
            self.lag_max = max(self.lag_max, lag)
            self.lag_n += 1
        self._pump()

    def _pump(self) -> None:
        """Catch the model up to now, deliver finished requests, and arm the timer for the next event."""
        self._timer = None
        self._timer_due = None
        now = self.model_now()
        self._deliver(self.sched.advance(now))
        self._stream(now)
        self._flush_spans()
        self._arm(now)

    def _arm(self, now: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.loop is None:
            return
        nxt = self.sched.next_event_time()
        delay = None if nxt is None else max(0.0, (nxt - now) / self.time_scale)
        if any(r.stream for r in self.sched.running):
            delay = STREAM_INTERVAL_S if delay is None else min(delay, STREAM_INTERVAL_S)
        if delay is not None:
            self._timer = self.loop.call_later(delay, self._on_timer)
            self._timer_due = now + delay * self.time_scale
        else:
            self._timer_due = None

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
        for i in range(len(req.output_ids), upto):
            top = self._top_logprobs(plan, i, req.top_logprobs_num) if want_top else None
            if req.append_token(plan.ids[i], plan.logprobs[i], self.weight_version, top) is not None:
                break

    def _deliver(self, finished: list[SimReq]) -> None:
        if not finished:
            return
        reqs = []
        for sreq in finished:
            req: GenerateRequest = sreq.payload
            if sreq.state == "finished":
                self._materialize(sreq, sreq.done)
                if req.finish_reason is None:  # defensive: the plan always ends in a finish rule
                    req.finish(FinishReason("length", length=len(req.output_ids)))
                req.cached_tokens = sreq.cached_tokens // self.k
                if self.sched.cache.enabled:
                    self.sched.cache_insert(PrefixCache.block_hashes(req.input_ids + req.output_ids,
                                                                     self._wire_block))
            else:  # aborted
                self._materialize(sreq, sreq.done)
                req.finish(FinishReason.abort())
            self._forget(sreq)
            reqs.append(req)
        self.notify(reqs)

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
        self.notify(woken)

    def _forget(self, sreq: SimReq) -> None:
        self._sim.pop(sreq.rid, None)
        self._plans.pop(sreq.rid, None)

    def _plan_output(self, req: GenerateRequest) -> tuple[int, _OutputPlan]:
        """Draw the request's output now: (tokens it will generate, the plan).

        The continuation is a function of the prompt and seed only (greedy: of the prompt), not
        of stop settings, so a request with a stop token / stop string returns a prefix of the
        same request without one, as a real model does. The sequence holds no special tokens;
        unless ignore_eos, EOS ends it at a geometric "natural" length. Stop ids and stop
        strings are then applied in SGLang's order (the same rules `append_token` enforces).
        """
        sp = req.sampling
        if sp.seed is not None:
            seed: Any = f"seed:{sp.seed}"
        elif sp.greedy:
            seed = hash(tuple(req.input_ids))
        else:
            seed = self._rng.getrandbits(64)
        ids_rng, lp_rng, len_rng, top_rng = (random.Random(f"{seed}:{k}") for k in "ilnt")
        max_new = sp.max_new_tokens
        end = max_new
        eos = min(req.eos_token_ids) if req.eos_token_ids else None
        if not sp.ignore_eos and eos is not None:
            p = 1.0 / self.profile.outputs.natural_mean_tokens
            natural = 1 if p >= 1 else 1 + int(math.log(1.0 - len_rng.random()) / math.log(1.0 - p))
            end = min(end, natural)
        ids = ids_rng.choices(self._token_pool, k=end)
        if end < max_new and eos is not None:
            ids[-1] = eos
        stop_ids = req.stop_ids
        if stop_ids:
            for i, t in enumerate(ids):
                if t in stop_ids:
                    ids = ids[: i + 1]
                    break
        if req.stop_matcher is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            if any(s in text for s in req.stop_matcher.stops):
                for i in range(len(ids)):
                    if req.stop_matcher.match(ids[: i + 1]) is not None:
                        ids = ids[: i + 1]
                        break
        scale = abs(self.profile.outputs.logprob_mean) * (0.1 if sp.greedy else 1.0)
        logprobs = [-lp_rng.expovariate(1.0 / scale) if scale > 0 else 0.0 for _ in ids]
        return len(ids), _OutputPlan(ids, logprobs, top_rng)

    def _top_logprobs(self, plan: _OutputPlan, i: int, k: int) -> list[tuple[float, int]]:
        """Top-k (logprob, id) for position i: the sampled token plus alternatives sharing the
        remaining probability mass (halving), sorted best first; probabilities sum to <= 1."""
        lp, tok = plan.logprobs[i], plan.ids[i]
        rest = max(1e-12, 1.0 - math.exp(lp))
        others = [t for t in plan.rng.sample(self._token_pool, min(k + 1, len(self._token_pool))) if t != tok][: k - 1]
        top = [(lp, tok)] + [(math.log(rest * 0.5 ** (j + 1)), t) for j, t in enumerate(others)]
        top.sort(key=lambda x: -x[0])
        return top[:k]

    def _input_logprobs(self, req: GenerateRequest, rng: random.Random) -> None:
        if not req.return_logprob or req.logprob_start_len < 0:
            return
        start = min(req.logprob_start_len, len(req.input_ids))
        lps: list[float | None] = []
        for pos in range(start, len(req.input_ids)):
            lps.append(None if pos == 0 else -rng.expovariate(0.5))
        req.input_token_logprobs = lps
        if req.top_logprobs_num > 0:
            req.input_top_logprobs = [None if lp is None else [(lp, req.input_ids[start + j])]
                                      for j, lp in enumerate(lps)]

    # ------------------------------------------------------------------ EngineCore hooks
    def _submit(self, req: GenerateRequest) -> None:
        target, plan = self._plan_output(req)
        self._input_logprobs(req, plan.rng)
        k = self.k
        sreq = SimReq(rid=req.rid, input_len=len(req.input_ids) * k, max_new_tokens=req.sampling.max_new_tokens * k,
                      target=max(1, target) * k,
                      input_blocks=PrefixCache.block_hashes(req.input_ids, self._wire_block)
                      if self.sched.cache.enabled else [],
                      payload=req, stream=req.stream, priority=priority(req))
        self._sim[req.rid] = sreq
        self._plans[req.rid] = plan
        self._after(self.sched.submit(sreq, self.model_now()))

    async def _abort(self, rids: list[str] | None) -> int:
        targets = list(self._sim.values()) if rids is None else [self._sim[r] for r in rids if r in self._sim]
        finished: list[SimReq] = []
        now = self.model_now()
        for sreq in targets:
            finished += self.sched.abort(sreq, now)
        aborted = [s for s in targets if s.state == "aborted"]
        self._after(finished + [s for s in aborted if s not in finished])
        return len(aborted)

    async def _pause(self, mode: Literal["retract", "in_place"]) -> int:
        affected, finished = self.sched.pause(mode, self.model_now())
        for sreq in affected:
            self._materialize(sreq, sreq.done)   # what was generated before the pause is kept
            if mode == "retract":
                sreq.payload.num_retractions += 1
        self._after(finished)
        return len(affected)

    async def _resume(self) -> None:
        self._after(self.sched.resume(self.model_now()))

    async def _flush_cache(self) -> tuple[bool, str]:
        self._pump()
        if self.sched.flush_cache():
            return True, "Cache flushed."
        return False, "Cache not flushed: there are running requests."

    async def _load_weights(self, model_path: str, load_format: str | None) -> tuple[bool, str]:
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
        done = asyncio.get_running_loop().create_future()
        self._after(self.sched.request_reload(self.latency.reload_s, now,
                                              on_done=lambda: done.done() or done.set_result(None)))
        await done
        self.last_reload = {"bytes": nbytes, "files": nfiles, "io_s": io_s,
                            "model_reload_s": self.latency.reload_s, "wall_s": time.perf_counter() - t0}
        return True, (f"Succeeded to update model weights: read {nfiles} file(s), {nbytes / 1e9:.3f} GB in "
                      f"{io_s:.2f}s; modelled GPU reload {self.latency.reload_s:.1f}s.")

    def get_load(self) -> SimLoadInfo:
        if self.loop is not None and _on_loop(self.loop):
            self._pump()
        s = self.sched
        running = s.running + s.prefilling
        return SimLoadInfo(
            num_running_reqs=len(running), num_waiting_reqs=len(s.waiting),
            num_tokens=sum(r.context for r in running), max_running_requests=self.max_running_requests,
            max_total_tokens=self.profile.capacity.max_total_tokens, max_running_batch_seen=s.max_batch_seen,
            num_pending_admission=self._pending_admission, paused=self._paused,
            busy_s=s.busy_until(self.model_now()) - s.reload_busy_s, prefill_s=s.prefill_busy_s,
            decode_s=s.decode_busy_s, reload_s=s.reload_busy_s,
            model_time_s=self.model_now(), time_scale=self.time_scale, generated_tokens=s.generated_tokens,
            prefill_tokens=s.prefill_token_count, cached_tokens=s.cached_token_count, retractions=s.retractions,
            lag_mean_s=self.lag_sum / max(self.lag_n, 1), lag_max_s=self.lag_max,
        )

    def server_info(self) -> dict[str, Any]:
        info = super().server_info()
        info["sim"] = {**self.get_load().to_json()["sim"], "profile": self.profile.name, "token_scale": self.k,
                       "decode_step_ms_b1": self.latency.decode_step_s(1, 0) * 1e3, "last_reload": self.last_reload}
        return info

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


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def read_safetensors_dir(path: str | os.PathLike) -> tuple[int, int]:
    """Read every byte of an HF safetensors checkpoint directory; returns (bytes, files).

    Checks what a real loader would trip over first (config.json present, at least one
    *.safetensors, each with a parseable header whose data fits the file) so the sim fails a
    bad version the way an engine would, and reads the data so the disk cost is real.
    """
    d = Path(path)
    if not d.is_dir():
        raise ValueError(f"{d} is not a directory")
    if not (d / "config.json").exists():
        raise ValueError(f"{d} has no config.json")
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ValueError(f"{d} has no *.safetensors files")
    total = 0
    buf = bytearray(_READ_CHUNK)
    view = memoryview(buf)
    for f in files:
        size = f.stat().st_size
        with open(f, "rb", buffering=0) as fh:
            head = fh.read(8)
            if len(head) != 8:
                raise ValueError(f"{f.name} is truncated")
            (hlen,) = struct.unpack("<Q", head)
            if hlen > size - 8:
                raise ValueError(f"{f.name} has a corrupt header")
            header = json.loads(fh.read(hlen))
            end = max((int(v["data_offsets"][1]) for k, v in header.items() if k != "__metadata__"), default=0)
            if 8 + hlen + end > size:
                raise ValueError(f"{f.name} is truncated ({size} bytes, header needs {8 + hlen + end})")
            while True:
                n = fh.readinto(view)
                if not n:
                    break
        total += size
    return total, len(files)
