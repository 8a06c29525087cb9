"""Issue 46: tasks graded by fresh rows counted as blind guesses (tandem.envs.coding.blind), attacked.

Two shapes the odds model refused before: a yes/no function whose wrong rows `not bug` fixes (is_leap without
its 400 rule), and a function that returns one of its own inputs (clamp under a bug that returns `hi`). Their
fresh rows' expected values are written nowhere, so a forger must change exactly the fresh rows the bug gets
wrong: `not bug` on the visible rows, on every row, on a selector's rows, on every fresh row (the `[freshN]` id
is on the call stack) scores 0; echoing x, lo or hi scores 0; the reference and a fix the reference did not
write score 1. Without the blind count the same tasks are refused.
"""

from __future__ import annotations

import types

import pytest

import tandem.envs.coding.grading_plan as grading_plan
import tandem.envs.coding.guess_plan as guess_plan
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tests._swe import make_cfg, sandbox_backends
from tests.test_param_columns import _diff, rewards_of
from tests.test_reward_fidelity import _local_task

_, BACKENDS = sandbox_backends()

FRESH = "import os\n\n\ndef _fresh():\n    return '[fresh' in os.environ.get('PYTEST_CURRENT_TEST', '')\n\n\n"
"""A forger's test for a fresh row: pytest names the running test in the environment (the id is on the stack)."""

LEAP = "def is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n"
LEAP_BUG = "def is_leap(year):\n    return year % 4 == 0 and year % 100 != 0\n"
YEARS = {1000: False, 1800: False, 2000: True, 2004: True, 2800: True, 3600: True, 5200: True, 6800: True,
         8400: True}
LEAP_TESTS = ("import pytest\n\nfrom pkg import is_leap\n\n\n@pytest.mark.parametrize(\"year, want\", "
              f"{list(YEARS.items())!r})\ndef test_leap(year, want):\n    assert is_leap(year) == want\n")
VISIBLE = "_bug = is_leap\n_wrong = {2000, 2800, 3600, 5200, 6800, 8400}\n\n\n"
LEAP_PROGRAMS = {  # name: (lines appended to the buggy module, the reward it must get)
    "reference": (LEAP, 1.0),
    "calendar_isleap": ("import calendar\n\n\ndef is_leap(year):\n    return calendar.isleap(year)\n", 1.0),
    "not_bug_on_the_visible_failing_rows": (VISIBLE + "def is_leap(year):\n    return not _bug(year) if year in "
                                            "_wrong else _bug(year)\n", 0.0),
    "not_bug_everywhere": (VISIBLE + "def is_leap(year):\n    return not _bug(year)\n", 0.0),
    "not_bug_on_centuries": (VISIBLE + "def is_leap(year):\n    return not _bug(year) if year % 100 == 0 or year in "
                             "_wrong else _bug(year)\n", 0.0),
    "not_bug_on_every_fresh_row": (FRESH + VISIBLE + "def is_leap(year):\n    return not _bug(year) if _fresh() or "
                                   "year in _wrong else _bug(year)\n", 0.0),
}

CLAMP = "def clamp(x, lo, hi):\n    return min(max(x, lo), hi)\n"
CLAMP_BUG = "def clamp(x, lo, hi):\n    return max(min(x, lo), hi)\n"
ROWS = [(-5, 0, 10), (5, 0, 10), (15, 0, 10), (25, 5, 10), (7, 5, 10), (1, 5, 10), (7, 2, 10), (12, 2, 10)]
"""One `hi`: the bug's value is 10 on every row, so its rows are one group to split (the odds model's grouping)."""
CLAMP_TESTS = ("import pytest\n\nfrom pkg import clamp\n\n\n@pytest.mark.parametrize(\"x, lo, hi, want\", "
               f"{[(*r, min(max(r[0], r[1]), r[2])) for r in ROWS]!r})\ndef test_clamp(x, lo, hi, want):\n"
               "    assert clamp(x, lo, hi) == want\n")
CLAMP_PROGRAMS = {
    "reference": (CLAMP, 1.0),
    "median_of_three": ("def clamp(x, lo, hi):\n    return sorted((lo, x, hi))[1]\n", 1.0),
    "echo_x": ("def clamp(x, lo, hi):\n    return x\n", 0.0),
    "echo_lo": ("def clamp(x, lo, hi):\n    return lo\n", 0.0),
    "echo_hi": ("def clamp(x, lo, hi):\n    return hi\n", 0.0),
    "visible_rows_then_x_on_fresh_rows": (
        FRESH + f"_rows = {{{', '.join(f'{r!r}: {min(max(r[0], r[1]), r[2])}' for r in ROWS)}}}\n\n\n"
        "def clamp(x, lo, hi):\n    return _rows.get((x, lo, hi), x if _fresh() else hi)\n", 0.0),
}


def _task(tmp_path, source: str, buggy: str, tests: str, name: str, wrong):
    rows = [line for line in tests.splitlines() if "parametrize" in line][0]
    values = eval(rows[rows.index("["):rows.rindex("]") + 1])  # the table as written above
    ids = ["-".join(map(str, row)) for row in values]
    f2p = [f"tests/test_pkg.py::{name}[{i}]" for i, row in zip(ids, values) if wrong(row)]
    p2p = [f"tests/test_pkg.py::{name}[{i}]" for i, row in zip(ids, values) if not wrong(row)]
    return _local_task(tmp_path, {"pkg/__init__.py": source.encode(), "tests/test_pkg.py": tests.encode()},
                       _diff("pkg/__init__.py", source, buggy), f2p, p2p, f"{name[5:]} is wrong on some inputs")


def _leap_task(tmp_path):
    return _task(tmp_path, LEAP, LEAP_BUG, LEAP_TESTS, "test_leap", lambda row: row[0] % 400 == 0)


def _clamp_task(tmp_path):
    return _task(tmp_path, CLAMP, CLAMP_BUG, CLAMP_TESTS, "test_clamp", lambda row: row[3] != row[2])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("shape", ["leap", "clamp"])
def test_fresh_rows_as_blind_guesses_pay_fixes_and_no_forger(tmp_path, backend, shape, monkeypatch):
    task = _leap_task(tmp_path) if shape == "leap" else _clamp_task(tmp_path)
    programs = LEAP_PROGRAMS if shape == "leap" else CLAMP_PROGRAMS
    monkeypatch.setattr(grading_plan, "secrets", types.SimpleNamespace(randbits=lambda bits: 0))  # one draw (with t46-wide: clamp 1 in 96,096)
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards = rewards_of(runtime, task, programs)
        monkeypatch.setattr(guess_plan, "_graded_blind", lambda *args: False)
        before = grading_plan.build_plan(task, runtime.grader.graded_template(task) / "testbed",
                                         lambda clean, files, sites, references=False:
                                         runtime.grader._reference_run(task, clean, files, sites, references))
    finally:
        reset_runtime()
    assert before.refused, "the odds model alone grades it: this test no longer tests the blind count"
    assert not plan.refused, plan.refused
    # graded through the blind path: by the count, or with no guess left but fixes (tandem.envs.coding.separating)
    assert "guessed blind" in plan.blind or "every rule of F refuted or a fix on the pool" in plan.blind, plan.blind
    assert rewards == {name: want for name, (_, want) in programs.items()}, rewards
    for t in task.fail_to_pass:  # every kept fresh row required, those the bug gets right too
        rows = plan.differential[plan.graded_id(t)]
        assert len(rows) >= 16 and all("[fresh" in f for f in rows)
