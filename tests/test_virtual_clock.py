"""The virtual-clock loop (tandem/lab/sim/virtual_clock.py) and a whole sim run on it (tandem.lab.virtual)."""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time

import pytest

from tandem.config import load_config
from tandem.lab.sim import virtual_clock
from tandem.lab.inprocess import InProcessRouter
from _golden import assert_golden_rows


def test_a_long_sleep_returns_at_once_with_the_clock_moved_by_exactly_that():
    async def main():
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.sleep(3600)
        return loop.time() - t0

    wall = time.perf_counter()
    assert virtual_clock.run(main()) == 3600.0
    assert time.perf_counter() - wall < 1.0


def test_timers_and_sleeps_fire_in_order_at_their_exact_times():
    async def main():
        loop = asyncio.get_running_loop()
        fired = []

        async def sleeper(delay, name):
            await asyncio.sleep(delay)
            fired.append((name, loop.time()))

        loop.call_later(2.5, lambda: fired.append(("timer", loop.time())))
        loop.call_at(7.0, lambda: fired.append(("at", loop.time())))
        await asyncio.gather(sleeper(3, "c"), sleeper(1, "a"), sleeper(2, "b"), sleeper(10, "d"))
        return fired

    assert virtual_clock.run(main()) == [("a", 1.0), ("b", 2.0), ("timer", 2.5), ("c", 3.0), ("at", 7.0),
                                         ("d", 10.0)]


def test_waiting_on_nothing_that_can_ever_happen_is_a_deadlock_error():
    async def main():
        await asyncio.sleep(5)
        await asyncio.Event().wait()

    with pytest.raises(virtual_clock.VirtualClockDeadlock, match="deadlock at t = 5.000"):
        virtual_clock.run(main())


def test_executor_work_runs_inline_and_unix_time_is_the_virtual_clock_from_a_fixed_epoch():
    async def main():
        await asyncio.sleep(12)
        thread = await asyncio.to_thread(threading.get_ident)
        return thread, virtual_clock.unix_time()

    thread, now = virtual_clock.run(main())
    assert thread == threading.get_ident()
    assert now == virtual_clock.VIRTUAL_EPOCH + 12


def test_the_router_stand_in_pins_each_key_and_sends_new_keys_to_the_least_loaded_engine():
    cfg = load_config([])
    router = InProcessRouter(cfg, {"engine0": "http://e0", "engine1": "http://e1"}, http=None)
    assert router.pick("a") == "http://e0"          # tie: the first engine
    router.in_flight["http://e0"] = 3
    assert router.pick("b") == "http://e1"          # new key: fewest in flight
    router.in_flight["http://e1"] = 9
    assert router.pick("a") == "http://e0" and router.pick("b") == "http://e1"   # sticky
    assert router.pick("c") == "http://e0"


def _virtual_run(tmp_path, name, monkeypatch):
    from tandem.lab import virtual
    from tandem.lab.sim import workload

    # A fresh process numbers its rollout calls from 0 (the workload's draws depend on it).
    monkeypatch.setattr(workload, "_calls", itertools.count())
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"prompt": f"sim task {i}", "label": ""}) + "\n" for i in range(16)))
    run_dir = tmp_path / name
    wall = time.perf_counter()
    virtual.run(["--engines", "2", "--mode", "async", "--steps", "4", "--run-dir", str(run_dir),
                 "--engine.backend", "sim", "--trainer.backend", "sim",
                 "--rollout.function", "tandem.lab.sim.workload:agentic_rollout",
                 "--rollout.reward", "tandem.lab.sim.workload:agentic_reward", "--data.path", str(tasks),
                 "--rollout.prompts_per_step", "2", "--rollout.samples_per_prompt", "2",
                 "--engine.sim.token_scale", "8", "--trainer.sim.train_time_s", "400",
                 "--logging.live", "off", "--logging.tensorboard", "false"])
    return run_dir, time.perf_counter() - wall


def test_a_virtual_run_is_far_faster_than_modelled_time_and_repeats_exactly(tmp_path, monkeypatch):
    from tandem.lab.sim.sweep import Point, analyse

    first, wall = _virtual_run(tmp_path, "a", monkeypatch)
    second, _ = _virtual_run(tmp_path, "b", monkeypatch)
    rows = [json.loads(line) for line in (first / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 4
    assert all(r["train_time"] == pytest.approx(400.0) for r in rows)
    assert sum(r["step_time"] for r in rows) > 1600 > 20 * wall
    assert (first / "metrics.jsonl").read_text() == (second / "metrics.jsonl").read_text()
    assert_golden_rows(first, "virtual_run_metrics.jsonl")  # and as before the composition root
    for trace in ("sim/engine0.jsonl", "sim/engine1.jsonl", "queue.jsonl"):
        assert (first / trace).read_text() == (second / trace).read_text()
    # The run directory is what the sweep's analysis reads from a real run.
    result = analyse(Point("async", 2), first, 1.0, wall)
    assert result.ok and result.train_s == pytest.approx(400.0) and 0 < result.efficiency <= 1.0
