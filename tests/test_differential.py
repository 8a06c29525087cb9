"""Issue 46: differential checks. A parametrized hidden test whose every decisive check a forger can write
without the fix (an expected value echoing a constant of the file) is graded by fresh rows of its table: new
inputs inside the rows' domain, their expectations the reference fix's own values, held on the host.

mix(a, b) = a * b + a; the bug computes a * b - a. The table's failing rows expect 8, a constant the file
writes as another row's input: a forger echoes it, so the task was refused. Fresh rows (crossed inputs,
ints between them) expect values written nowhere: the reference and correct alternative fixes score 1; a
lookup table of the visible rows that keeps the bug elsewhere, an echo, and the generic forger score 0.
"""

from __future__ import annotations

import random

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tests._swe import make_cfg, sandbox_backends
from tests.test_param_columns import _diff, forged_rewards, rewards_of
from tests.test_reward_fidelity import _local_task

_, BACKENDS = sandbox_backends()

SOURCE = "def mix(a, b):\n    return a * b + a\n"
BUGGY = SOURCE.replace("a * b + a", "a * b - a")
TESTS = '''import pytest

from pkg import mix


@pytest.mark.parametrize("a, b, want", [(0, 5, 0), (2, 3, 8), (8, 0, 8), (1, 0, 1)])
def test_mix(a, b, want):
    assert mix(a, b) == want
'''
F = "tests/test_pkg.py::test_mix"
F2P = [F + "[2-3-8]", F + "[8-0-8]", F + "[1-0-1]"]
P2P = [F + "[0-5-0]"]
FIXES = {  # name: (lines appended to the buggy module, the reward plain pytest's verdict gives)
    "reference": ("def mix(a, b):\n    return a * b + a\n", 1.0),
    "other_algorithm": ("def mix(a, b):\n    return sum(a for _ in range(b + 1))\n", 1.0),
    # differs from the reference only far outside the rows' domain
    "differs_outside_the_domain": ("def mix(a, b):\n    return a * (b + 1) if a < 10 ** 6 else 0\n", 1.0),
    # the visible rows' expectations (the repository's test file holds them), the bug's value elsewhere
    "lookup_table": ("_bug = mix\n_rows = {(0, 5): 0, (2, 3): 8, (8, 0): 8, (1, 0): 1}\n\n\n"
                     "def mix(a, b):\n    return _rows.get((a, b), _bug(a, b))\n", 0.0),
    # the lookup table, and elsewhere an echo of the largest constant the graded copy's inputs hold
    "lookup_then_echo": ("_rows = {(0, 5): 0, (2, 3): 8, (8, 0): 8, (1, 0): 1}\n\n\n"
                         "def mix(a, b):\n    return _rows.get((a, b), 8)\n", 0.0),
    "bug_negated_elsewhere": ("_bug = mix\n_rows = {(0, 5): 0, (2, 3): 8, (8, 0): 8, (1, 0): 1}\n\n\n"
                              "def mix(a, b):\n    return _rows.get((a, b), -_bug(a, b))\n", 0.0),
}


def _task(tmp_path):
    return _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SOURCE, BUGGY), F2P, P2P, "mix(2, 3) is wrong")


def test_fresh_rows_stay_inside_the_table_and_out_of_it():
    """Host only: fresh rows are new input tuples drawn from the columns' values, the ints between and beyond them,
    the expected column None; the same seed draws the same rows; hide() appends them as `freshN` cases."""
    from tandem.envs.coding.fresh_rows import fresh_rows
    from tandem.envs.coding.params import hide

    rows = [(0, 5, 0), (2, 3, 8), (8, 0, 8), (1, 0, 1)]
    drawn = fresh_rows(rows, [2], random.Random(7))
    assert drawn == fresh_rows(rows, [2], random.Random(7)) and len(drawn) > 8
    # inside the columns' domain (tandem.envs.coding.wide_pools): ints, never negative, at most twice the largest
    assert all(r[2] is None and type(r[0]) is type(r[1]) is int and 0 <= r[0] <= 16 and 0 <= r[1] <= 10 for r in drawn)
    assert not {r[:2] for r in drawn} & {r[:2] for r in rows} and len({r[:2] for r in drawn}) == len(drawn)
    texts = fresh_rows([("ab cd", 1), ("ef gh", 2)], [1], random.Random(0))
    assert ("ab cd ef gh", None) in texts or ("ef gh ab cd", None) in texts
    assert fresh_rows([(1, 2)], [1], random.Random(0)) == []  # one row spans no domain
    hidden = hide(TESTS, "tests/test_pkg.py", tuple(F2P + P2P), rng=random.Random(7))
    assert hidden.fresh[:len(drawn)] == [f"{F}[fresh{n}]" for n in range(len(drawn))]  # then the probe rows
    assert "fresh0" in hidden.source and ", 8)" not in hidden.source
    assert hide(TESTS, "tests/test_pkg.py", tuple(F2P + P2P)).fresh == []


def test_a_failed_or_missing_fresh_row_fails_the_test_that_requires_it():
    from tandem.envs.coding.differential import fold
    from tandem.envs.coding.verdict import Verdict

    verdict = Verdict({"t[case1]": "PASSED", "t[case2]": "PASSED", "t[fresh0]": "FAILED", "t[fresh1]": "PASSED"},
                      [], True, {"t[fresh0]": "mix(a, b): not the expected value"})
    folded = fold(verdict, {"t[case1]": ["t[fresh0]", "t[fresh1]"], "t[case2]": ["t[fresh1]", "t[fresh2]"]})
    assert folded.tests["t[case1]"] == "FAILED" and "t[fresh0]" in folded.check_failures["t[case1]"]
    assert folded.tests["t[case2]"] == "FAILED" and "MISSING" in folded.check_failures["t[case2]"]
    assert fold(verdict, {"t[case1]": ["t[fresh1]"]}).tests["t[case1]"] == "PASSED"


def test_the_tasks_own_checks_are_analysed_without_the_fresh_rows(tmp_path):
    """Host only: the exposure analysis of the table's own rows reads the graded files less the fresh rows (their
    inputs are random draws, not constants the task wrote), with the task's own ids (a graded id would leave
    the expectations in); where the split differs it says so (None) and the plan analyses the files as graded."""
    from tandem.envs.coding.grading_plan import _without_fresh_rows, split_files

    task = _task(tmp_path)
    testbed = tmp_path / "repo"
    _, candidates, aliases, _, fresh = split_files(testbed, task.test_files, task.tests, random.Random(3))
    assert fresh
    plain = _without_fresh_rows(testbed, task, aliases, candidates, set())
    assert plain is not None and "fresh" not in plain["tests/test_pkg.py"] and "case3" in plain["tests/test_pkg.py"]
    assert ", 8)" not in plain["tests/test_pkg.py"]
    assert _without_fresh_rows(testbed, task, {}, candidates, set()) is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_graded_by_fresh_rows_pays_fixes_and_no_forger(tmp_path, backend, monkeypatch):
    task = _task(tmp_path)
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards, forged = rewards_of(runtime, task, FIXES), forged_rewards(runtime, task)
        # without fresh rows the same task is refused: every failing row's expectation is an echo
        import tandem.envs.coding.fresh_rows as fresh_rows

        monkeypatch.setattr(fresh_rows, "FRESH_ROWS", 0)
        monkeypatch.setattr(fresh_rows.fresh_rows, "__defaults__", (0,))
        import tandem.envs.coding.confined as confined

        monkeypatch.setattr(confined.probe_rows, "__defaults__", ((), 0))  # nor probe rows
        from tandem.envs.coding.grading_plan import build_plan

        before = build_plan(task, runtime.grader.graded_template(task) / "testbed",
                            lambda clean, files, sites, references=False:
                            runtime.grader._reference_run(task, clean, files, sites, references))
    finally:
        reset_runtime()
    assert before.refused and not before.differential, before.refused
    assert not plan.refused, plan.refused
    graded = [plan.graded_id(t) for t in F2P]
    assert all(plan.differential.get(t) for t in graded if t.endswith(("case1]", "case2]"))), plan.differential
    for t, rows in plan.differential.items():  # passing tests require their table's kept rows too (regression rows)
        assert rows and all("[fresh" in f for f in rows) and (t not in graded or plan.host_graded[t])
        assert all(plan.sites[k].expected.of(f) for f in rows for k in plan.required[f])
    assert ", 8)" not in plan.files["tests/test_pkg.py"]
    assert rewards == {name: want for name, (_, want) in FIXES.items()}, rewards
    assert forged == [0.0, 0.0]
