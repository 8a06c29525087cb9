"""Issue 46: is_leap's grading plan on the realistic task (data/swe_realistic) holds fresh rows the bug fails
beyond the visible rows. The bug drops `if year % 400 == 0: return True`; the table's span 1600..2100 holds no
multiple of 400 but its two failing rows, so rows drawn inside the span never told the bug from a lookup table
of the visible rows. The wider rows (tandem.envs.coding.wide_pools) move the failing years along their step."""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.edge_rows import EDGE_ROWS
from tandem.envs.coding.hard_rows import HARD_ROWS
from tandem.envs.coding.wide_pools import WIDEN_BOUND
from tandem.envs.coding.fresh_rows import CONTRAST_SHARE, FRESH_ROWS, STRUCTURE_SHARE
from tandem.envs.coding.grading_plan import build_plan
from tandem.envs.coding.separating import SEPARATING_ROWS
from tandem.envs.coding.swe_data import load_bundled
from tests._swe import REPO, make_cfg, sandbox_backends
from tests.test_wide_pools import YEARS, fresh_inputs

_, BACKENDS = sandbox_backends()
REALISTIC = REPO / "data" / "swe_realistic" / "tasks.jsonl"
SEED = 46


@pytest.mark.parametrize("backend", BACKENDS)
def test_is_leaps_plan_holds_fresh_rows_the_bug_fails_beyond_the_visible_rows(tmp_path, backend):
    _check_is_leaps_plan(tmp_path, backend, SEED)


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_learn_odd_meets_a_required_separating_row_where_the_fresh_rows_hold_none(tmp_path, backend, seed):
    """Seeds 1 and 2 draw fresh rows with no multiple of 16 the bug gets right (main's draws, the same here: the pool
    draws apart): learn:odd (flip where the year is a multiple of 16) passed them; the separating rows catch it."""
    _check_is_leaps_plan(tmp_path, backend, seed)


def _check_is_leaps_plan(tmp_path, backend, seed):
    task = next(t for t in load_bundled(Path(REALISTIC)) if "_remove_cond_is_leap__" in t.instance_id)
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        testbed = runtime.grader.graded_template(task) / "testbed"
        plan = build_plan(task, testbed,
                          lambda clean, files, sites, references=False:
                          runtime.grader._reference_run(task, clean, files, sites, references), seed=seed)
    finally:
        reset_runtime()
    # the graded copy: its fresh rows and the pool rows kept as separating rows (tandem.envs.coding.separating)
    everything = fresh_inputs(plan.files["tests/test_leap.py"], "test_is_leap")
    years = {f: y for f, y in everything.items() if y <= WIDEN_BOUND * max(YEARS)}  # hard rows past the guard apart
    failed = {f.rsplit("[", 1)[1].rstrip("]") for f in plan.fresh_failed if "::test_is_leap[fresh" in f}  # not probes
    visible = set(YEARS)
    assert failed, (plan.fresh_failed, years)
    # the bug differs from the reference exactly on the multiples of 400: each failed row is one, none visible
    assert all(years[f] % 400 == 0 and years[f] not in visible for f in failed), (failed, years)
    assert failed == {f for f, y in years.items() if y % 400 == 0}, (failed, years)
    most = (FRESH_ROWS + FRESH_ROWS // STRUCTURE_SHARE + FRESH_ROWS // CONTRAST_SHARE + SEPARATING_ROWS + EDGE_ROWS
            + HARD_ROWS)
    assert len(everything) <= most, len(everything)  # the pool rows that separate nothing left the graded copy
    for t in (t for t in task.fail_to_pass if "test_is_leap" in t):  # learn:odd meets a row it answers wrong
        required = [years[i] for f in plan.differential[plan.graded_id(t)] if (i := f.rsplit("[", 1)[1][:-1]) in years]
        assert any(y % 16 == 0 and y % 400 for y in required), sorted(required)
