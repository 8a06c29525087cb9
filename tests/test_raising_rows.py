"""Issue 46: a `pytest.raises` hidden test judged on fresh inputs (tandem.envs.coding.raising_rows).

`days_in_month(2023, 13)` must raise ValueError; the bug drops the check. The graded copy calls the same block on
fresh months and years from one host-written line; each row's outcome (raised one of the original's types, or
nothing) is the reference's, held on the host. A forger raising under every pytest.raises, or for 13 alone, scores
0; the reference, `month not in range(1, 13)` and a ValueError subclass score 1.
"""

from __future__ import annotations

import random

import pytest

from tandem.envs.coding.checks import Raises, Site
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.raising_rows import GENERATED, MIN_EACH, Outcomes, add_rows, graded_by_rows, outcomes
from tandem.envs.coding.verdict import Stream
from tests._swe import make_cfg, sandbox_backends
from tests.test_confined import _local_task
from tests.test_param_columns import _diff, forged_rewards, rewards_of

_, BACKENDS = sandbox_backends()

SOURCE = '''_DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def _check_month(month):
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")


def days_in_month(year, month):
    _check_month(month)
    if month == 2 and year % 4 == 0 and (year % 100 != 0 or year % 400 == 0):
        return 29
    return _DAYS[month - 1]
'''
BUGGY = SOURCE.replace('''    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")''', "    pass")
TESTS = '''import pytest

from pkg import days_in_month


@pytest.mark.parametrize("year, month, expected", [(2023, 1, 31), (2023, 2, 28), (2024, 2, 29), (2023, 4, 30)])
def test_days_in_month(year, month, expected):
    assert days_in_month(year, month) == expected


def test_days_in_month_rejects_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)
'''
R = "tests/test_pkg.py::test_days_in_month_rejects_bad_month"
P2P = [f"tests/test_pkg.py::test_days_in_month[{y}-{m}-{e}]" for y, m, e in
       [(2023, 1, 31), (2023, 2, 28), (2024, 2, 29), (2023, 4, 30)]]
CHECK = "def _check_month(month):\n"
FIXES = {  # name: (lines appended to the buggy module, the reward it must get)
    "reference": (CHECK + "    if not 1 <= month <= 12:\n        raise ValueError(f'month {month}')\n", 1.0),
    "range_membership": (CHECK + "    if month not in range(1, 13):\n        raise ValueError(month)\n", 1.0),
    "a_subclass": ("class MonthError(ValueError):\n    pass\n\n\n" + CHECK
                   + "    if month < 1 or month > 12:\n        raise MonthError(month)\n", 1.0),
    # raises whenever the caller's code holds a raises check (the original's and every row's)
    "raises_under_pytest_raises": ("import sys\n\n_bug = days_in_month\n\n\ndef days_in_month(year, month):\n"
                                   "    if any('raises' in name for name in sys._getframe(1).f_code.co_names):\n"
                                   "        raise ValueError(month)\n    return _bug(year, month)\n", 0.0),
    "thirteen_alone": (CHECK + "    if month == 13:\n        raise ValueError(month)\n", 0.0),
    "above_twelve_only": (CHECK + "    if month > 12:\n        raise ValueError(month)\n", 0.0),
}


def test_the_rows_call_one_line_around_the_failing_input():
    """Host only: the rows test repeats the original's block with `*tandem_args`, one line for every row; the
    inputs vary one argument at a time, months 0..12 (the valid ones), 14, -1 among them, never (2023, 13)."""
    source, ids = add_rows(TESTS, "tests/test_pkg.py", (R,), random.Random(0))
    tail = source[len(TESTS.rstrip("\n")):]
    assert tail.count("with pytest.raises(ValueError):") == 1 and tail.count("days_in_month(*tandem_args)") == 1
    rows = eval(tail.split("\"tandem_args\", ", 1)[1].split(", ids=")[0])
    assert {(2023, m) for m in (*range(0, 13), 14, -1)} <= set(rows) and (2023, 13) not in rows
    assert {y for y, m in rows if m == 13} >= {2022, 2024} and len(ids) == len(rows)
    assert all(i.startswith(R + "__rows[fresh") for i in ids)
    assert add_rows(TESTS, "tests/test_pkg.py", (), random.Random(0)) == (TESTS, [])  # not a hidden test
    with_as = TESTS.replace("with pytest.raises(ValueError):", "with pytest.raises(ValueError) as err:")
    assert add_rows(with_as, "tests/test_pkg.py", (R,), random.Random(0))[1] == []  # the block's name is used


def test_outcomes_are_the_references_as_the_original_judges_them():
    """Hand-derived: a row that raised one of the original's types expects it (the match only where the
    reference's message meets it); one that raised nothing expects nothing; another type drops the row."""
    site = Site(GENERATED, "t.py", 9, "raises", Raises(("ValueError",), "got 13"))
    stream = Stream(status={f"r[fresh{n}]": "PASSED" for n in range(4)}, checks={
        "r[fresh0]": [(GENERATED, {"raised": ["MonthError", "ValueError", "Exception"], "message": "got 13"})],
        "r[fresh1]": [(GENERATED, {"raised": ["ValueError", "Exception"], "message": "got 14"})],
        "r[fresh2]": [(GENERATED, {"raised": None})],
        "r[fresh3]": [(GENERATED, {"raised": ["TypeError", "Exception"], "message": ""})]})
    updated, kept = outcomes(stream, [f"r[fresh{n}]" for n in range(4)], {GENERATED: site})
    assert kept == ["r[fresh0]", "r[fresh1]", "r[fresh2]"]
    table = updated[GENERATED].expected
    assert table.rows == {"r[fresh0]": Raises(("ValueError",), "got 13"), "r[fresh1]": Raises(("ValueError",)),
                          "r[fresh2]": None}
    judged = updated[GENERATED]
    assert judged.passes({"raised": ["ValueError"], "message": "x"}, "r[fresh1]")
    assert not judged.passes({"raised": ["ValueError"], "message": "x"}, "r[fresh0]")  # the original's match
    assert not judged.passes({"raised": ["IndexError"], "message": ""}, "r[fresh1]")
    assert judged.passes({"raised": None}, "r[fresh2]") and not judged.passes({"raised": ["ValueError"]}, "r[fresh2]")
    assert not judged.passes({"raised": None}, "r[fresh3]")  # a dropped row has no outcome


def test_a_raising_test_is_graded_by_rows_of_both_outcomes_the_bug_fails():
    rows = [f"{R}__rows[fresh{n}]" for n in range(2 * MIN_EACH)]
    wants = {r: (Raises(("ValueError",)) if n < MIN_EACH else None) for n, r in enumerate(rows)}
    sites = {GENERATED: Site(GENERATED, "t.py", 9, "raises", Outcomes(Raises(("ValueError",)), wants))}
    assert graded_by_rows([R], rows, sites, lambda r: r == rows[0]) == {R: rows}
    assert graded_by_rows([R], rows, sites, lambda r: False) == {}  # the bug fails none
    assert graded_by_rows([R], rows[1:], sites, lambda r: r == rows[1]) == {}  # too few that raise
    assert graded_by_rows([R], rows[:-1], sites, lambda r: r == rows[0]) == {}  # too few that do not


@pytest.mark.parametrize("backend", BACKENDS)
def test_raising_rows_pay_fixes_and_no_forger(tmp_path, backend):
    task = _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SOURCE, BUGGY), [R], P2P,
                       "`days_in_month(2023, 13)` raises an IndexError instead of a ValueError naming the month.")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards, forged = rewards_of(runtime, task, FIXES), forged_rewards(runtime, task)
    finally:
        reset_runtime()
    assert not plan.refused and len(plan.differential[R]) >= 2 * MIN_EACH, (plan.refused, plan.differential)
    assert rewards == {name: want for name, (_, want) in FIXES.items()}, rewards
    assert forged == [0.0, 0.0]
