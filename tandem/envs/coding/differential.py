"""Differential checks (issue 46): fresh rows of a parametrized hidden test, judged on the reference fix's values.

    @pytest.mark.parametrize("a, b, want", [(12, 18, 6), (-4, 6, 2), (17, 5, 1)])
    def test_gcd(a, b, want):
        assert gcd(a, b) == want

The rows' expected values are often small ints, bools or strings a forger writes without the fix (an
echo of a constant in the files, a usual default, one of the few values the bug returns elsewhere):
tandem.envs.coding.exposure then leaves such a test without a decisive check beyond a forger's reach,
and the task used to be refused. Where tandem.envs.coding.params takes a table's expected column out of the
graded copy, it also appends **fresh rows** (fresh_rows): new inputs inside the domain the table's own rows
span (the columns' values crossed between rows, ints between a column's values, strings of the column
joined), drawn with a seed the host holds (a new one per plan, never written into a sandbox). Their
expected values are written nowhere: they are the reference fix's own values, computed in the plan's clean
run and held on the host (expectations); a fresh row where the reference returns what the host cannot judge,
or changes between the clean and the confirming run is dropped; one where it raises is dropped here, and kept as
a row that must raise where the bug raises the same class (tandem.envs.coding.raising_values).

A hidden test of the table whose own decisive checks are all within a forger's reach is graded when the
bug fails fresh rows of it whose values are beyond a forger's reach too (the exposure analysis runs over
the fresh rows, their inputs among the copy's constants): those rows are then required for that test
(GradingPlan.differential; GradingPlan.in_task_ids fails the test when one fails).
A forger sees the fresh inputs when its code runs in the graded copy, never their expectations: a lookup
table of the visible rows, echoes and the bug's own values do not pass them. A correct fix that passes the
original rows agrees with the reference on rows inside their domain unless it differs from the reference
where the tests never looked: such a fix scores 0 on a task graded only thanks to fresh rows (measured in
the closing note of issue 46 on the realistic set).
"""

from __future__ import annotations

from dataclasses import replace

from tandem.envs.coding.checks import Reference, Site
from tandem.envs.coding.fresh_rows import owner
from tandem.envs.coding.verdict import Stream, Verdict, lookup

__all__ = ["expectations", "fold", "owner", "without"]


def expectations(clean: Stream, fresh: list[str], sites: dict[int, Site]) -> tuple[dict[int, Site], list[str]]:
    """The held sites with each fresh row's reference values (from the clean run), and the fresh rows kept:
    those whose test passed and whose every host-held check the reference's own values meet."""
    updated: dict[int, Site] = {}
    kept = []
    for f in fresh:
        events = lookup(clean.checks, f, [])
        held = {k for k, _ in events if k in sites and isinstance(sites[k].expected, Reference)
                and sites[k].expected.held}
        if lookup(clean.status, f) != "PASSED" or not held:
            continue
        trial = {k: updated.get(k, sites[k]) for k in held}
        for k in held:
            ref = trial[k].expected
            values = tuple(v for j, v in events if j == k)
            trial[k] = replace(trial[k], expected=replace(ref, values={**ref.values, f: values}))
        judged = {**sites, **updated, **trial}
        counts: dict[int, int] = {}
        ok = True
        for k, value in events:
            if k in judged:
                nth = counts[k] = counts.get(k, -1) + 1
                ok = ok and judged[k].passes(value, f, nth)
        if ok:
            updated.update(trial)
            kept.append(f)
    return updated, kept


def without(stream: Stream, dropped: set[str]) -> Stream:
    """The stream less the fresh rows the plan does not judge (their values are no expectation)."""
    return replace(stream, checks={t: e for t, e in stream.checks.items() if t not in dropped})


def fold(verdict: Verdict, differential: dict[str, list[str]]) -> Verdict:
    """The verdict with each hidden test failed where a fresh row it requires did not pass (graded ids)."""
    tests, failures = dict(verdict.tests), dict(verdict.check_failures)
    for test, rows in differential.items():
        failed = [f for f in rows if tests.get(f, "MISSING") != "PASSED"]
        if test not in tests or not failed:
            continue
        tests[test] = "FAILED" if tests[test] == "PASSED" else tests[test]
        why = verdict.check_failures.get(failed[0], tests.get(failed[0], "MISSING"))
        failures.setdefault(test, f"a fresh row of its table fails ({failed[0]}: {why}); its expected value is "
                                  f"the reference fix's, held on the host")
    return replace(verdict, tests=tests, check_failures=failures)
