"""Issue 46: real grading plans of the realistic set hold fresh rows the bug fails beyond the visible rows where
only the failing rows' structure reaches the bug (tandem.envs.coding.structure_rows).

needs_reorder (`count < threshold` for `<=`) fails only where count == threshold; classify_triangle's op_flip
(`a + b < c` for `<=`) only on a degenerate triangle. Before the structure rows, no fresh row of either plan
was one (bench/fresh_failed.py: 0 on seeds 1 and 2). Here each plan's failing fresh rows exist, none is a
visible row, and each has the structure; and where the triangle task is graded, programs that change only the
visible rows (a lookup of the failing row, the same for any order of its sides) score 0, the reference and
two corpus fixes 1.
"""

from __future__ import annotations

import ast
import random
from pathlib import Path

import pytest

import tandem.envs.coding.grading as grading
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.grading_plan import build_plan, split_files
from tandem.envs.coding.swe_data import load_bundled
from tests._swe import REPO, make_cfg, sandbox_backends
from tests.test_param_columns import _diff_of

_, BACKENDS = sandbox_backends()
REALISTIC = REPO / "data" / "swe_realistic" / "tasks.jsonl"
SEEDS = (1, 2, 3, 4, 5)


def _task(marker: str):
    return next(t for t in load_bundled(Path(REALISTIC)) if marker in t.instance_id)


def table_rows(source: str, test: str) -> dict[str, tuple]:
    """`freshN` id -> the row (inputs, None for the expected columns) of `test`'s table in a graded copy."""
    func = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == test)
    mark = func.decorator_list[0]
    rows = ast.literal_eval(mark.args[1])
    ids = ast.literal_eval(next(k.value for k in mark.keywords if k.arg == "ids"))
    return {i: r for i, r in zip(ids, rows) if i.startswith("fresh")}


def _failed_rows(runtime, task, rel: str, test: str, seed: int) -> list[tuple]:
    """The inputs of the fresh rows (not probes) of `test` that the plan drawn with `seed` finds the bug failing."""
    testbed = runtime.grader.graded_template(task) / "testbed"
    sources = split_files(testbed, task.test_files, task.tests, random.Random(seed), task.fail_to_pass)[0]
    plan = build_plan(task, testbed, lambda clean, files, sites, references=False:
                      runtime.grader._reference_run(task, clean, files, sites, references), seed=seed)
    rows = table_rows(sources[rel], test)
    return [rows[f.rsplit("[", 1)[1].rstrip("]")] for f in plan.fresh_failed if f"::{test}[fresh" in f]


@pytest.mark.parametrize("backend", BACKENDS)
def test_needs_reorder_and_the_triangle_plans_hold_failing_rows_of_the_failing_structure(tmp_path, backend):
    reorder, triangle = _task("_op_flip_needs_reorder__"), _task("_op_flip_classify_triangle__")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        counts = _failed_rows(runtime, reorder, "tests/test_helpers.py", "test_needs_reorder", SEEDS[0])
        sides = _failed_rows(runtime, triangle, "tests/test_triangle.py", "test_classify", SEEDS[0])
    finally:
        reset_runtime()
    # the bug differs from the reference exactly where count == threshold: (10, 10) and (0, 0) are visible
    assert len(counts) >= 2 and all(c == t and (c, t) not in {(10, 10), (0, 0)} for c, t, _ in counts), counts
    # ... and exactly on a degenerate triangle: (1, 2, 3) is the visible one; a scaled one (2, 4, 6) is among
    # them, which no lookup of (1, 2, 3) by its sorted sides reaches
    flat = [sorted(s) for s, _ in sides]
    assert len(flat) >= 2 and all(a > 0 and a + b == c for a, b, c in flat), sides
    assert any(s != [1, 2, 3] for s in flat) and all(s != (1, 2, 3) for s, _ in sides), sides


KIND = "from shapekit.plane import Kind\n"
FORGERS = {  # lines appended to shapekit/plane.py; each changes the buggy function on the visible rows only
    "lookup_of_the_visible_failing_row": KIND + "_bug = classify_triangle\n\n\ndef classify_triangle(a, b, c):\n"
                                         "    return Kind.INVALID if (a, b, c) == (1, 2, 3) else _bug(a, b, c)\n",
    "lookup_by_sorted_sides": KIND + "_bug = classify_triangle\n\n\ndef classify_triangle(a, b, c):\n"
                              "    return Kind.INVALID if sorted((a, b, c)) == [1, 2, 3] else _bug(a, b, c)\n",
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_triangle_graded_by_its_structure_rows_pays_no_visible_row_forger(tmp_path, backend, monkeypatch):
    from bench.fix_corpus import take_diff
    from bench.forge_rate import agent_diff
    from tests._fix_corpus_real import realistic_corpus

    task = _task("_op_flip_classify_triangle__")
    fixes = [fx for fx in realistic_corpus() if fx.task == "shapekit/op_flip_classify_triangle"]
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        for seed in SEEDS:  # the first draw that grades the task (about two in three do: bench/fresh_failed.py)
            monkeypatch.setattr(grading, "build_plan", lambda *a, seed=seed, **k: build_plan(*a, seed=seed, **k))
            grading._PLANS.clear()
            if not runtime.grader.plan(task).refused:
                break
        plan = runtime.grader.plan(task)
        reference = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True)).reward
        fixed = [runtime.grader.grade(task, take_diff(runtime, task, fx)).reward for fx in fixes]
        forged = {name: runtime.grader.grade(task, _diff_of(runtime, task, f"cat >> shapekit/plane.py <<'EOF'\n\n\n"
                                                                           f"{lines}EOF\n")).reward
                  for name, lines in FORGERS.items()}
    finally:
        grading._PLANS.clear()
        reset_runtime()
    assert not plan.refused, plan.refused
    assert reference == 1.0 and len(fixed) >= 2 and set(fixed) == {1.0}, (reference, fixed)
    assert forged == {name: 0.0 for name in FORGERS}, forged
