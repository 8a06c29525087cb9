"""The sim engine: latency-model unit tests with hand-computed numbers, the scheduler's queueing
/ KV / cache behaviour, the HTTP core's timing and weight reloads, and the SAME SGLang API
conformance suite the embedded engine runs (tests/engine_conformance.py), against a real
`python -m tandem.engine` subprocess with engine.backend = "sim", directly and behind a real
sglang-router.

Conformance runs the sim at time_scale 2 (modelled seconds pass twice as fast as wall time):
the suite's long requests must still be running when it pauses or aborts them, and its 32
concurrent requests must overlap in one decode batch.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from pathlib import Path

import pytest

from engine_conformance import *  # noqa: F401,F403  (fixtures and conformance tests)
from engine_conformance import ROOT, core_generate, start_engine, stop_process, wait_load
from tandem.lab.sim.latency import LatencyModel
from tandem.lab.sim.profiles import (CapacityParams, DecodeParams, Dist, EngineProfile, PrefillParams, ProfileError,
                                 engine_profile_from_dict, load_engine_profile, load_workload_profile)
from tandem.lab.sim.scheduler import PrefixCache, SimReq, SimScheduler

ENGINE_BACKEND = "sim"
ENGINE_EXTRA_CAPS = {"deterministic"}  # greedy output is a function of the prompt, like a real model's
SHIPPED_ENGINE = ROOT / "profiles/engine/qwen3_14b_h100.toml"
SHIPPED_WORKLOAD = ROOT / "profiles/workload/reference_agentic.toml"


@pytest.fixture(scope="module")
def engine_proc(tmp_path_factory):  # overrides the suite's fixture: same engine, sim parameters
    e = start_engine(tmp_path_factory.mktemp("engine_sim"), "sim",
                     sim={"profile": str(SHIPPED_ENGINE), "time_scale": 2.0})
    yield e
    stop_process(e.proc)


# --------------------------------------------------------------------------- latency model
def simple_model(**kw) -> LatencyModel:
    """base 10 ms, 1 ms per sequence, 1 us per KV token; prefill 100 us/token, 5 ms per forward."""
    p = EngineProfile(decode=DecodeParams(base_ms=10.0, per_seq_ms=1.0, per_kv_token_us=1.0),
                      prefill=PrefillParams(base_ms=5.0, per_token_us=100.0, attn_us_per_token_per_1k_ctx=kw.get(
                          "attn", 0.0), chunk_tokens=kw.get("chunk", 8192)))
    return LatencyModel.from_profile(p)


def test_decode_step_and_series_by_hand():
    m = simple_model()
    # 10 ms + 4 x 1 ms + 1000 x 1 us = 15 ms
    assert m.decode_step_s(4, 1000) == pytest.approx(0.015)
    # Three steps; the KV grows by 4 tokens per step: 15 + 15.004 + 15.008 ms
    assert m.decode_steps_s(3, 4, 1000) == pytest.approx(0.045012)
    assert m.steps_within(0.045012, 4, 1000) == 3
    assert m.steps_within(0.045011, 4, 1000) == 2
    assert m.steps_within(0.0, 4, 1000) == 0
    assert m.decode_step_s(0, 0) == 0.0


def test_prefill_by_hand():
    m = simple_model(attn=2.0, chunk=1000)
    # 1500 new tokens after 500 cached: 1500 x 100 us = 150 ms; attention 2e-9 s per pair x
    # (1500 x 500 + 1500 x 1499 / 2) = 2e-9 x 1,874,250 = 3.7485 ms; two 1000-token forwards: 10 ms
    assert m.prefill_s([(1500, 500)]) == pytest.approx(0.150 + 0.0037485 + 0.010)
    # A batch of two requests shares forwards: 2 x 400 tokens fit one chunk.
    assert m.prefill_s([(400, 0), (400, 0)]) == pytest.approx(0.005 + 0.080 + 2e-9 * 2 * (400 * 399 / 2))
    assert m.prefill_s([]) == 0.0


def test_shipped_profile_matches_its_published_checks():
    """The numbers profiles/engine/qwen3_14b_h100.toml says it reproduces (GPUStack, 1x H100)."""
    m = LatencyModel.from_profile(load_engine_profile(SHIPPED_ENGINE))
    # ShareGPT-like: ~600 running at ~300 tokens of context: ~54 ms steps, ~11k tok/s (measured: 12.1k peak, 51 ms ITL)
    step = m.decode_step_s(600, 600 * 300)
    assert 0.050 < step < 0.058 and 10_000 < 600 / step < 12_500
    # Single stream: ~77 tok/s.
    assert 70 < 1 / m.decode_step_s(1, 1000) < 80
    # Prefill throughput at 2K and 32K prompts (measured ~10.1k and ~8.3k tok/s).
    assert 10_000 < 2048 / (m.prefill_tokens_s(2048, 0)) < 11_500
    assert 7_800 < 32000 / (m.prefill_tokens_s(32000, 0)) < 8_800


# --------------------------------------------------------------------------- profiles
def test_profile_loading_rejects_unknown_keys_and_bad_values(tmp_path):
    assert load_engine_profile(SHIPPED_ENGINE).capacity.max_total_tokens == 270000
    wl = load_workload_profile(SHIPPED_WORKLOAD)
    assert (wl.batch.prompts_per_step, wl.batch.samples_per_prompt, wl.agent.turns.max) == (23, 8, 20)
    with pytest.raises(ProfileError, match="decode.base_msx"):
        engine_profile_from_dict({"decode": {"base_msx": 1.0}})
    with pytest.raises(ProfileError, match="decode.base_ms"):
        engine_profile_from_dict({"decode": {"base_ms": "fast"}})
    bad = tmp_path / "w.toml"
    bad.write_text('[agent]\nturns = { dist = "zipf", mean = 3 }\n')
    with pytest.raises(ProfileError, match="agent.turns.dist"):
        load_workload_profile(bad)


def test_distributions():
    import random

    rng = random.Random(0)
    geo = Dist("geometric", mean=6, min=1, max=20)
    xs = [geo.sample_int(rng) for _ in range(20000)]
    # Geometric with mean 6 clipped at 20: E = sum_{k<20} P(X > k) = (1 - (5/6)^20) / (1/6) = 5.84
    assert statistics_mean(xs) == pytest.approx(6 * (1 - (5 / 6) ** 20), rel=0.03)
    assert min(xs) == 1 and max(xs) == 20
    logn = Dist("lognormal", median=400, sigma=0.6)
    ys = sorted(logn.sample(rng) for _ in range(20000))
    assert ys[len(ys) // 2] == pytest.approx(400, rel=0.03)
    assert Dist("const", value=3.5).sample(rng) == 3.5


def statistics_mean(xs):
    return sum(xs) / len(xs)


# --------------------------------------------------------------------------- scheduler
def fixed_ratio_capacity(total: int, **kw) -> CapacityParams:
    """Admission reserve ratio pinned at 1.0 so the arithmetic is easy to follow by hand."""
    return CapacityParams(max_total_tokens=total, init_new_token_ratio=1.0, min_new_token_ratio=1.0, **kw)


def run_to_end(s: SimScheduler) -> list[SimReq]:
    done = []
    while s.next_event_time() is not None:
        done += s.advance(s.next_event_time())
    return done


def test_fifo_admission_against_the_kv_budget_by_hand():
    """KV 1000 tokens; three requests of 300 prompt + 100 new tokens, all at t=0.

    A is prefilled alone (35 ms: 5 ms + 300 x 100 us). After it, A holds 301 tokens and reserves
    its 99 remaining: budget 1000 - 301 - 99 = 600, so B (300 + 100 = 400) is admitted and C
    (needs 400 of the remaining 200) waits at the head of the FIFO. A and B decode 99 steps
    together (10 ms each: no per-seq / KV cost here) and finish at 35 + 35 + 990 = 1060 ms; then
    C is prefilled (35 ms) and decodes 99 steps alone: 1060 + 35 + 990 = 2085 ms.
    """
    p = EngineProfile(decode=DecodeParams(base_ms=10.0, per_seq_ms=0.0, per_kv_token_us=0.0),
                      prefill=PrefillParams(base_ms=5.0, per_token_us=100.0, attn_us_per_token_per_1k_ctx=0.0))
    s = SimScheduler(LatencyModel.from_profile(p), fixed_ratio_capacity(1000), PrefixCache(64, enabled=False))
    reqs = {n: SimReq(n, input_len=300, max_new_tokens=100, target=100) for n in "ABC"}
    for r in reqs.values():
        s.submit(r, 0.0)
    s.advance(0.035)
    assert [r.rid for r in s.waiting] == ["C"] and [r.rid for r in s.prefilling] == ["B"]
    done = run_to_end(s)
    assert [r.rid for r in done] == ["A", "B", "C"]
    assert reqs["A"].finished_at == pytest.approx(1.060)
    assert reqs["B"].finished_at == pytest.approx(1.060)
    assert reqs["C"].finished_at == pytest.approx(2.085)
    assert s.busy_s == pytest.approx(2.085)            # never idle
    assert s.kv_used == 0 and s.decode_steps == 99 + 99
    # Each request's work share: A = its prefill + half of the shared decode.
    assert reqs["A"].work_s == pytest.approx(0.035 + 0.990 / 2)


def test_priority_scheduling_serves_the_older_step_first_by_hand():
    """KV 500 tokens fits one request of 300 prompt + 100 new at a time. A (priority -1) runs;
    B (priority -2: a rollout started early for the next step) arrives before C (priority -1:
    the step the trainer waits on). Each request takes 35 ms of prefill + 99 x 10 ms of decode
    = 1.025 s. FIFO runs A, B, C (C done at 3.075 s); priority scheduling runs A, C, B, so C is
    done at 2.050 s and B at 3.075 s."""
    p = EngineProfile(decode=DecodeParams(base_ms=10.0, per_seq_ms=0.0, per_kv_token_us=0.0),
                      prefill=PrefillParams(base_ms=5.0, per_token_us=100.0, attn_us_per_token_per_1k_ctx=0.0))

    def run(by_priority: bool) -> dict[str, SimReq]:
        s = SimScheduler(LatencyModel.from_profile(p), fixed_ratio_capacity(500), PrefixCache(64, enabled=False),
                         priority_scheduling=by_priority)
        reqs = {n: SimReq(n, input_len=300, max_new_tokens=100, target=100, priority=pr)
                for n, pr in (("A", -1), ("B", -2), ("C", -1))}
        for r in reqs.values():
            s.submit(r, 0.0)
        assert [r.rid for r in s.waiting] == (["C", "B"] if by_priority else ["B", "C"])
        run_to_end(s)
        return reqs

    fifo, prio = run(False), run(True)
    assert fifo["B"].finished_at == pytest.approx(2.050) and fifo["C"].finished_at == pytest.approx(3.075)
    assert prio["C"].finished_at == pytest.approx(2.050) and prio["B"].finished_at == pytest.approx(3.075)


def test_enqueue_keeps_fifo_within_a_priority_and_retractions_in_front():
    from collections import deque
    from types import SimpleNamespace as R

    from tandem.engine.queueing import enqueue

    q: deque = deque()
    for name, pr in (("a", 0), ("b", -1), ("c", 0), ("d", None), ("e", 5)):
        enqueue(q, R(name=name, priority=pr), by_priority=True)
    assert [r.name for r in q] == ["e", "a", "c", "d", "b"]      # None counts as 0, after a and c
    enqueue(q, R(name="r", priority=0), by_priority=True, front=True)
    assert [r.name for r in q] == ["e", "r", "a", "c", "d", "b"]  # head of its own class only
    fifo: deque = deque()
    for name, pr in (("a", 0), ("b", 9)):
        enqueue(fifo, R(name=name, priority=pr), by_priority=False)
    enqueue(fifo, R(name="r", priority=-9), by_priority=False, front=True)
    assert [r.name for r in fifo] == ["r", "a", "b"]


def test_retraction_when_decode_overflows_kv():
    """KV 500; two 200-token prompts each wanting 150 new tokens. With the reserve ratio at its
    floor (0.0) both are admitted, but 2 x 350 > 500: the newest is retracted back to the queue,
    loses its KV, and is re-prefilled (prompt + what it had generated) after the first finishes."""
    p = EngineProfile(decode=DecodeParams(base_ms=10.0, per_seq_ms=0.0, per_kv_token_us=0.0))
    cap = CapacityParams(max_total_tokens=500, init_new_token_ratio=0.0, min_new_token_ratio=0.0,
                         clip_max_new_tokens=0)
    s = SimScheduler(LatencyModel.from_profile(p), cap, PrefixCache(64, enabled=False))
    a, b = SimReq("a", 200, 150, 150), SimReq("b", 200, 150, 150)
    s.submit(a, 0.0)
    s.submit(b, 0.0)
    done = run_to_end(s)
    assert {r.rid for r in done} == {"a", "b"} and s.retractions == 1 and b.retractions == 1
    assert a.finished_at < b.finished_at and b.prefill_tokens > 200   # b re-prefilled its generated tokens
    assert s.kv_used == 0


def test_prefix_cache_reuse_and_flush():
    p = EngineProfile(decode=DecodeParams(base_ms=10.0, per_seq_ms=0.0, per_kv_token_us=0.0),
                      prefill=PrefillParams(base_ms=0.0, per_token_us=100.0, attn_us_per_token_per_1k_ctx=0.0))
    s = SimScheduler(LatencyModel.from_profile(p), fixed_ratio_capacity(100_000), PrefixCache(64))
    ids = list(range(1000))
    blocks = PrefixCache.block_hashes(ids, 64)
    assert len(blocks) == 15                           # 1000 // 64 full blocks
    first = SimReq("1", 1000, 10, 10, input_blocks=blocks)
    s.submit(first, 0.0)
    run_to_end(s)
    assert first.cached_tokens == 0
    second = SimReq("2", 1000, 10, 10, input_blocks=blocks)
    t0 = s.now
    s.submit(second, t0)
    run_to_end(s)
    # 15 blocks x 64 = 960 tokens reused; only 40 are prefilled: 4 ms instead of 100 ms.
    assert second.cached_tokens == 960 and second.prefill_tokens == 40
    assert second.first_token_at - t0 == pytest.approx(0.004)
    assert s.flush_cache() and s.cache.size_tokens == 0


def test_pause_retract_in_place_abort_and_reload():
    m = simple_model()
    s = SimScheduler(m, fixed_ratio_capacity(100_000), PrefixCache(64, enabled=False))
    r = SimReq("r", 100, 1000, 1000)
    s.submit(r, 0.0)
    s.advance(0.5)
    affected, _ = s.pause("retract", 0.5)
    assert affected == [r] and r.state == "waiting" and s.kv_used == 0 and 0 < r.done < 1000
    done_at_pause = r.done
    s.advance(5.0)
    assert r.done == done_at_pause                     # paused: nothing runs
    fired = []
    s.request_reload(2.0, 5.0, on_done=lambda: fired.append(s.now))   # a reload runs while paused
    s.advance(7.0)
    assert fired and fired[0] == pytest.approx(7.0)    # it held the GPU for 2 s
    s.resume(7.0)
    run_to_end(s)
    assert r.state == "finished" and r.done == 1000 and s.reload_busy_s == pytest.approx(2.0)
    q = SimReq("q", 100, 1000, 1000)
    s.submit(q, 100.0)
    s.advance(100.2)
    s.abort(q, 100.2)
    assert q.state == "aborted" and 0 < q.done < 1000 and s.kv_used == 0
    spans = s.pop_spans(close_open=True)
    assert all(sp.end > sp.start for sp in spans) and sum(sp.busy_s + sp.reload_s for sp in spans) == pytest.approx(s.busy_s)


# --------------------------------------------------------------------------- the core (in process)
def _core(profile: EngineProfile | None = None, time_scale: float = 1000.0, trace: Path | None = None,
          priority_scheduling: bool = False):
    from tandem.lab.sim_engine import SimEngineCore
    from tandem.model_source import build_byte_tokenizer

    return SimEngineCore(tokenizer=build_byte_tokenizer(), model_path="sim", profile=profile or EngineProfile(),
                         time_scale=time_scale, trace_path=trace, priority_scheduling=priority_scheduling)


def test_core_wall_time_follows_the_model_divided_by_time_scale(tmp_path):
    """One request alone: prefill 2000 tokens + 400 decode steps, computed from the profile, at 50x."""
    prof = EngineProfile()
    m = LatencyModel.from_profile(prof)
    expected = m.prefill_s([(2000, 0)]) + m.decode_steps_s(399, 1, 2001)

    async def run():
        core = _core(prof, time_scale=50.0, trace=tmp_path / "e.jsonl")
        await core.start()
        t0 = time.perf_counter()
        req = await core_generate(core, [65] * 2000, max_new_tokens=400, ignore_eos=True)
        wall = time.perf_counter() - t0
        load = core.get_load()
        await core.shutdown()
        return req, wall, load

    req, wall, load = asyncio.run(run())
    assert len(req.output_ids) == 400 and req.finish_reason.type == "length"
    # Never faster than the model (the virtual clock below is the exact check); slower only by
    # what a loaded machine adds, which is why the upper bound is loose.
    assert expected / 50.0 * 0.98 <= wall < expected / 50.0 + 2.0, (wall, expected / 50.0)
    assert load.busy_s == pytest.approx(expected, rel=1e-6)
    spans = [json.loads(line) for line in (tmp_path / "e.jsonl").read_text().splitlines()]
    busy = sum(x["busy_s"] for x in spans if x["type"] == "span")
    assert busy == pytest.approx(expected, rel=1e-6) and spans[-1]["type"] == "final"


def test_core_tokens_are_plausible_and_greedy_is_deterministic():
    async def run():
        core = _core()
        await core.start()
        a = await core_generate(core, [70] * 30, max_new_tokens=64, temperature=0.0, ignore_eos=True)
        b = await core_generate(core, [70] * 30, max_new_tokens=64, temperature=0.0, ignore_eos=True)
        c = await core_generate(core, [71] * 30, max_new_tokens=64, temperature=0.0, ignore_eos=True)
        d = await core_generate(core, [70] * 30, max_new_tokens=5000, temperature=1.0)  # stops by itself (EOS)
        await core.shutdown()
        return core, a, b, c, d

    core, a, b, c, d = asyncio.run(run())
    assert a.output_ids == b.output_ids != c.output_ids
    assert all(lp <= 0 for lp in a.output_logprobs + d.output_logprobs)
    assert statistics_mean(a.output_logprobs) > -0.2 > statistics_mean(d.output_logprobs)   # greedy ~ confident
    assert d.finish_reason.type == "stop" and d.output_ids[-1] == core.tokenizer.eos_token_id
    assert all(0 <= t < core.vocab_size for t in a.output_ids)
    assert a.output_text(core.tokenizer).isprintable()


def test_core_queue_depth_is_visible_in_its_load():
    """A KV pool of 3000 tokens holds at most two of these 1000 + 400-token requests at a time:
    the rest wait, FIFO, and /v1/loads shows them."""
    prof = EngineProfile(capacity=CapacityParams(max_total_tokens=3000))

    async def run():
        core = _core(prof, time_scale=20.0)
        await core.start()
        tasks = [asyncio.create_task(core_generate(core, [66 + i] * 1000, max_new_tokens=400, ignore_eos=True))
                 for i in range(6)]
        load = core.get_load().to_json()
        deadline = time.monotonic() + 30
        while load["num_running_reqs"] + load["num_waiting_reqs"] < 6 and time.monotonic() < deadline:  # until all six reached the engine
            await asyncio.sleep(0.002)
            load = core.get_load().to_json()
        await asyncio.gather(*tasks)
        await core.shutdown()
        return load

    load = asyncio.run(run())
    assert load["num_running_reqs"] <= 2 and load["num_waiting_reqs"] >= 4
    assert load["num_running_reqs"] + load["num_waiting_reqs"] == 6 and load["sim"]["busy_s"] > 0


def test_core_serves_requests_by_their_priority_when_enabled():
    """One 1000 + 400-token request fills a 1500-token KV pool; two more queue behind it. The
    request's `priority` field decides which of them runs next (FIFO when disabled)."""
    prof = EngineProfile(capacity=CapacityParams(max_total_tokens=1500))

    async def order(by_priority: bool) -> list[str]:
        core = _core(prof, time_scale=20.0, priority_scheduling=by_priority)
        await core.start()
        done: list[str] = []

        async def one(name: str, ids: list[int], priority: int) -> None:
            await core_generate(core, ids, priority=priority, max_new_tokens=400, ignore_eos=True)
            done.append(name)

        first = asyncio.create_task(one("first", [66] * 1000, -1))
        await wait_load(core, 1, 0)
        late_step = asyncio.create_task(one("next-step", [67] * 1000, -2))
        await wait_load(core, 1, 1)
        this_step = asyncio.create_task(one("this-step", [68] * 1000, -1))
        await wait_load(core, 1, 2)
        assert not done, "the first request ended before both others queued behind it"
        await asyncio.gather(first, late_step, this_step)
        await core.shutdown()
        return done

    assert asyncio.run(order(False)) == ["first", "next-step", "this-step"]
    assert asyncio.run(order(True)) == ["first", "this-step", "next-step"]


def test_core_weight_reload_reads_files_and_blocks_for_reload_s(tmp_path):
    """update_weights_from_disk reads every published byte (real I/O) and holds the modelled GPU
    for reload_s; a bad directory fails and keeps the version."""
    import torch

    from tandem.weights import publish_weights
    from tandem.lab.sim_trainer import make_weights

    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text("{}")
    path = publish_weights(make_weights(0.002, torch.bfloat16), src, tmp_path / "run", 1, keep_last=2)
    prof = EngineProfile()
    prof.weights.reload_s = 20.0

    async def run():
        core = _core(prof, time_scale=100.0)
        await core.start()
        t0 = time.perf_counter()
        ok = await core.update_weights_from_disk(str(path), "1")
        wall = time.perf_counter() - t0
        bad = await core.update_weights_from_disk(str(tmp_path / "nope"), "2")
        await core.shutdown()
        return core, ok, wall, bad

    core, ok, wall, bad = asyncio.run(run())
    assert ok.success and core.weight_version == "1"
    assert core.engine_backend.last_reload["bytes"] >= 0.002e9 and wall >= 0.2          # 20 s modelled / 100
    assert not bad.success and "nope" in bad.message and core.weight_version == "1"
    assert core.get_load().reload_s == pytest.approx(20.0)


# --------------------------------------------------------------------------- sim trainer
def test_sim_trainer_waits_scaled_train_time_and_exports_the_configured_size():
    import torch

    from tandem.config import TandemConfig
    from tandem.sample import Sample
    from tandem.lab.sim_trainer import SimTrainer

    cfg = TandemConfig.model_validate({"engine": {"backend": "sim", "sim": {"time_scale": 200.0}}, "model": {"dtype": "bfloat16"},
                                       "trainer": {"backend": "sim", "sim": {"train_time_s": 40.0,
                                                                              "weight_size_gb": 0.003}}})
    tr = SimTrainer(cfg)
    s = Sample(prompt_ids=[1, 2])
    s.append_model_tokens([3, 4], [-0.5, -1.5])
    s.advantage = 0.5
    t0 = time.perf_counter()
    m = tr.train_step([s])
    elapsed = time.perf_counter() - t0
    assert 0.2 * 0.98 <= elapsed < 0.2 + 30.0, elapsed      # 40 s / 200: never less, more only under load
    assert m["entropy"] == pytest.approx(1.0) and m["loss"] == pytest.approx(-0.5) and m["tokens"] == 2
    sd = tr.export_hf_state_dict()
    nbytes = sum(t.numel() * t.element_size() for t in sd.values())
    assert abs(nbytes - 0.003e9) < 2 and all(t.dtype == torch.bfloat16 for t in sd.values())
    assert all(sd[k].data_ptr() != tr.weights[k].data_ptr() for k in sd)  # no aliasing of live weights


# --------------------------------------------------------------------------- predictor
def test_predictor_on_shipped_profiles_reproduces_the_reference_shape():
    """The calibration the workload profile documents: one engine ~ the reference's 1-engine step."""
    from tandem.lab.sim.predict import predict

    prof, wl = load_engine_profile(SHIPPED_ENGINE), load_workload_profile(SHIPPED_WORKLOAD)
    one = predict(prof, wl, 1)
    three = predict(prof, wl, 3, routing="sticky")
    assert 1000 < one.rollout_makespan_s < 1500 and 1450 < one.sync_step_s < 1950   # reference: 1200 / 1697 s
    assert max(one.queue_peak) > 100 and max(three.queue_peak) < max(one.queue_peak)
    assert one.async_bound_s() / three.async_bound_s() > 2.0
    assert three.async_bound_s(staleness=2) < three.async_bound_s(staleness=1)
    assert math.isclose(sum(one.busy_s), one.busy_s[0])


def test_token_scale_keeps_model_timing_with_fewer_wire_tokens():
    """token_scale 4: 500 wire prompt tokens + 100 wire outputs are modelled as 2000 + 400."""
    from tandem.lab.sim_engine import SimEngineCore
    from tandem.model_source import build_byte_tokenizer

    prof = EngineProfile()
    m = LatencyModel.from_profile(prof)
    expected = m.prefill_s([(2000, 0)]) + m.decode_steps_s(399, 1, 2001)

    async def run():
        core = SimEngineCore(tokenizer=build_byte_tokenizer(), model_path="sim", profile=prof, time_scale=1000.0,
                             token_scale=4)
        await core.start()
        req = await core_generate(core, [65] * 500, max_new_tokens=100, ignore_eos=True)
        load = core.get_load()
        await core.shutdown()
        return req, load

    req, load = asyncio.run(run())
    assert len(req.output_ids) == 100 and req.finish_reason.type == "length"
    assert load.busy_s == pytest.approx(expected, rel=1e-6) and load.generated_tokens == 400


# --------------------------------------------------------------------------- workload rollout
class _CoreClient:
    """The orchestrator's engine client, narrowed to what a rollout plug-in calls, answering from a
    real SimEngineCore through the real /generate result formatting (http.native.generate_result)."""

    def __init__(self, core):
        self.core = core
        self.routing_keys: list[str | None] = []

    async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None):
        from tandem.engine.http.native import generate_result

        self.routing_keys.append(routing_key)
        from tandem.engine.core import SamplingParams

        tok = self.core.tokenizer
        req = self.core.make_request(input_ids=list(input_ids), return_logprob=return_logprob,
                                     sampling=SamplingParams.from_dict(sampling_params, vocab_size=len(tok)))
        async for _ in self.core.generate(req):
            pass
        return generate_result(req, tok, req.output_text(tok), with_text=False)


@pytest.mark.parametrize("token_scale", [1, 4])
def test_agentic_rollout_builds_multi_turn_samples(tmp_path, token_scale):
    from concurrent.futures import ThreadPoolExecutor

    from tandem.rollout import RolloutContext
    from tandem.config import TandemConfig
    from tandem.lab.sim_engine import SimEngineCore
    from tandem.model_source import build_byte_tokenizer
    from tandem.lab.sim import workload

    wl = tmp_path / "w.toml"
    wl.write_text("""
[agent]
max_context_tokens = 100000
prompt_tokens = { dist = "const", value = 400 }
turns = { dist = "const", value = 3 }
output_tokens = { dist = "const", value = 80 }
observation_tokens = { dist = "const", value = 40 }
tool_time_s = { dist = "const", value = 1.0 }
eval_time_s = { dist = "const", value = 2.0 }
solve_rate = 0.5
""")
    cfg = TandemConfig.model_validate({"engine": {"backend": "sim", "sim": {"workload": str(wl), "time_scale": 100.0,
                                                          "token_scale": token_scale}},
                                       "rollout": {"function": "tandem.lab.sim.workload:agentic_rollout",
                                                   "reward": "tandem.lab.sim.workload:agentic_reward"}})
    tok = build_byte_tokenizer()
    k = token_scale

    async def run():
        core = SimEngineCore(tokenizer=tok, model_path="sim", profile=load_engine_profile(SHIPPED_ENGINE),
                             time_scale=100.0, token_scale=k)
        await core.start()
        client = _CoreClient(core)
        with ThreadPoolExecutor(4) as ex:
            ctx = RolloutContext(cfg, tok, client, ex, workload.agentic_reward, {"temperature": 1.0})
            t0 = time.perf_counter()
            samples = await workload.agentic_rollout(ctx, {"prompt": "x", "_index": 3}, 4)
            wall = time.perf_counter() - t0
        await core.shutdown()
        return samples, wall, client.routing_keys

    samples, wall, keys = asyncio.run(run())
    assert len(keys) == 12 and len(set(keys)) == 4 and None not in keys   # one routing key per trajectory
    # The idle-engine critical path by hand (shipped profile, modelled tokens, model seconds):
    # turn 1 prefills the 400-token prompt, turns 2-3 only the 40 new observation tokens after
    # 480 / 600 cached ones; each turn then decodes 79 more tokens at batch 1; plus 2 x 1 s of
    # tools and 2 s of grading.
    m = LatencyModel.from_profile(load_engine_profile(SHIPPED_ENGINE))
    alone = (m.prefill_s([(400, 0)]) + m.decode_steps_s(79, 1, 400) + m.prefill_s([(40, 480)])
             + m.decode_steps_s(79, 1, 520) + m.prefill_s([(40, 600)]) + m.decode_steps_s(79, 1, 640) + 4.0)
    for s in samples:
        assert s.metadata["sim"]["alone_s"] == pytest.approx(alone / 100.0)
        # A lower bound: four rollouts sharing one engine take at least as long as one alone.
        assert s.metadata["sim"]["t_end"] - s.metadata["sim"]["t_start"] >= alone / 100.0
    assert len(samples) == 4
    assert wall >= (2 * 1.0 + 2.0) / 100.0                   # two tool calls + grading, slept at 100x
    for s in samples:
        assert s.prompt_ids == samples[0].prompt_ids and len(s.prompt_ids) == 400 // k   # one task per group
        # model 80 | obs 40 | model 80 | obs 40 | model 80 (wire tokens: divided by k)
        out, obs = 80 // k, 40 // k
        assert s.loss_mask == [1] * out + [0] * obs + [1] * out + [0] * obs + [1] * out
        assert len(s.rollout_logprobs) == len(s.response_ids) == len(s.loss_mask)
        assert all(lp < 0 for lp, m in zip(s.rollout_logprobs, s.loss_mask) if m)
        assert all(lp == 0.0 for lp, m in zip(s.rollout_logprobs, s.loss_mask) if not m)
        assert s.metadata["sim"]["turns"] == 3 and s.metadata["sim"]["context_tokens"] == 400 + 3 * 80 + 2 * 40
        assert s.reward in (0.0, 1.0) and s.reward_info["turns"] == 3
    metrics = workload.step_metrics(samples)
    assert metrics["sim_turns_mean"] == 3 and metrics["sim_longest_rollout_s"] > 0
    assert metrics["sim_longest_alone_s"] == pytest.approx(alone / 100.0)
