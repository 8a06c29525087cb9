"""The scaling sweep's lower bound, computed by hand from a synthetic trace (bench/scaling.py).

The sweep's efficiency figures are only as honest as this arithmetic, so it is checked the
torchtune way: a small trace whose bound is derived in the comments, term by term.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TS = 100.0  # time_scale: 1 wall second = 100 model seconds


def load_bench():
    spec = importlib.util.spec_from_file_location("bench_scaling", ROOT / "bench" / "scaling.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def write_run(run_dir: Path, steps: int, spans: dict[int, list[tuple[float, float, float, float]]]) -> None:
    """Step i ends at wall t = 10 (i + 1), so its window is [10 i, 10 (i + 1)]; every step trains 400 model s, syncs 20, takes 1000,
    and its longest rollout ran 500 s under load but would need 200 s alone."""
    rows = [{"step": i, "time": 10.0 * (i + 1), "train_time": 4.0, "sync_time": 0.2, "step_time": 10.0,
             "rollout_time": 5.0, "trainer_idle_ratio": 0.5, "sim_longest_rollout_s": 5.0,
             "sim_longest_alone_s": 2.0, "sim_loop_lag_ms": 1.0} for i in range(steps)]
    (run_dir / "sim").mkdir(parents=True)
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    for engine, items in spans.items():
        lines = [{"type": "span", "start": a, "end": b, "busy_s": busy, "reload_s": reload}
                 for a, b, busy, reload in items]
        (run_dir / "sim" / f"engine{engine}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_sync_bound_adds_training_to_the_rollout_side(tmp_path):
    """Sync, 2 engines, steps 0 (warm-up), 1 and 2 measured.

    Step 1 (wall 10-20): engine0 busy 10-16 wall with 5 parts generation : 1 part reload
    -> 500 + 100 model s; engine1 busy 12-15 -> 300. busy/N = 900 / 2 = 450, and in sync mode
    nothing overlaps training: engines term 450 + 400 = 850; longest term 200 + 20 + 400 = 620.
    Step 2 (20-30): engines idle -> 0 + 400 = 400; longest 620.
    Summed over both: engines 1250, longest 1240, train 800 -> bound 1250 / 2 = 625 per step,
    set by the engines; efficiency 1250 / 2000 = 0.625.
    """
    bench = load_bench()
    run = tmp_path / "sync"
    write_run(run, 3, {0: [(10.0, 16.0, 5.0, 1.0)], 1: [(12.0, 15.0, 3.0, 0.0)]})
    r = bench.analyse(bench.Point("sync", 2), run, TS, wall=1.0)
    assert [s["terms"]["engines"] for s in r.steps] == pytest.approx([850.0, 400.0])
    assert [s["terms"]["longest"] for s in r.steps] == pytest.approx([620.0, 620.0])
    assert r.dominant == "engines" and r.bound_s == pytest.approx(625.0)
    assert r.efficiency == pytest.approx(0.625)
    assert r.longest_rollout_s == pytest.approx(500.0) and r.longest_alone_s == pytest.approx(200.0)


def test_async_bound_lets_engines_overlap_training_and_spreads_the_tail_over_w_steps(tmp_path):
    """Async, staleness 1 (W = 2), 1 engine: steps 0-1 warm-up, steps 2-3 one measured cycle.

    Step 2 (wall 20-30): the engine is busy 20-29 -> 900 model s: engines term 900 (not + train:
    the engines work while the trainer trains); longest (200 + 20 + 400) / 2 = 310; train 400.
    Step 3 (30-40): engines 0, longest 310, train 400.
    Summed: engines 900, train 800, longest 620 -> bound 450 per step, set by the engines;
    efficiency 900 / 2000 = 0.45.
    """
    bench = load_bench()
    run = tmp_path / "async"
    write_run(run, 4, {0: [(20.0, 29.0, 9.0, 0.0)]})
    r = bench.analyse(bench.Point("async", 1), run, TS, wall=1.0)
    assert [s["step"] for s in r.steps] == [2, 3]
    assert [s["terms"]["engines"] for s in r.steps] == pytest.approx([900.0, 0.0])
    assert [s["terms"]["longest"] for s in r.steps] == pytest.approx([310.0, 310.0])
    assert r.dominant == "engines" and r.bound_s == pytest.approx(450.0)
    assert r.efficiency == pytest.approx(0.45)


def test_a_trace_too_short_for_one_measured_cycle_is_refused(tmp_path):
    bench = load_bench()
    run = tmp_path / "short"
    write_run(run, 3, {})
    with pytest.raises(ValueError, match="too few for 2 warm-up step"):
        bench.analyse(bench.Point("async", 1), run, TS, wall=1.0)


def test_seeds_are_independent_sweeps_summarised_by_hand():
    from tandem.lab.sim.sweep import Point, Result, across_seeds, speedup_by_seed

    def res(engines, seed, step, eff, bias=1.0):
        return Result(Point("async", engines, seed=seed), True, 0.0, step_s=step, efficiency=eff,
                      length_bias_turns=bias)
    results = [res(1, 0, 1200, 0.9), res(3, 0, 400, 1.0, 0.8), res(1, 1, 1300, 0.94), res(3, 1, 500, 0.8, 0.9)]
    assert Point("async", 3, seed=1).name.endswith("_seed1") and not Point("async", 3).name.endswith("seed0")
    on_grid = lambda r, mode: r.point.mode == mode  # noqa: E731
    assert speedup_by_seed(results, "async", 3, on_grid) == {0: 3.0, 1: 2.6}
    three = next(a for a in across_seeds(results) if a.point.engines == 3)
    assert three.seeds == [0, 1] and three.step_s == (450, 400, 500)
    assert three.efficiency == pytest.approx((0.9, 0.8, 1.0)) and three.length_bias_turns == pytest.approx((0.85, 0.8, 0.9))
