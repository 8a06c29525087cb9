"""Issue 46: echoes, usual defaults and yes/no counted as guesses with their odds (tandem.envs.coding.odds).

A check whose expected value a forger can write without the fix (a usual default, a yes/no, a constant of
the graded files) refused the whole task; a SWE-smith table `(month, expected)` writes every small int as
some row's input. Now the forger's choice is counted: the value among one family of candidates, and which
rows it must change. What a forger *selects* (one of the check's own inputs, a value the issue writes out)
stays exposed. The guess forgers of tests/_guessers.py attack the count.
"""

from __future__ import annotations

import math

import pytest

from tandem.envs.coding.checks import Reference, Site
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.odds import Guess, value_odds, ways
from tests._swe import make_cfg, sandbox_backends

_, BACKENDS = sandbox_backends()
FILE = "tests/test_x.py"


def _analyse(rows: list[tuple], bug: dict[int, object], statement: str = "", extra: str = ""):
    """One parametrized test `f(x) == want` over `rows` (x, want) as the graded copy holds it (the expected column
    taken out, cases named case0 ...), the bug computing bug[i] for row i."""
    from tandem.envs.coding.exposure import analyse

    table = ", ".join(f"({x!r}, None)" for x, _ in rows)
    text = (f"import pytest\n\n\n@pytest.mark.parametrize('x, want', [{table}], "
            f"ids={[f'case{i}' for i in range(len(rows))]!r})\ndef test_f(x, want):\n"
            f"    __tandem_check__(0, (f(x)))\n{extra}")
    tests = [f"{FILE}::test_f[case{i}]" for i in range(len(rows))]
    site = Site(0, FILE, 6, "==", Reference({t: (w,) for t, (_, w) in zip(tests, rows)}, held=True), "f(x)",
                None, ("f",))
    buggy = {t: [(0, bug[i])] for i, t in enumerate(tests)}
    required = {t: {0} for t in tests}
    return analyse({FILE: text}, {0: site}, buggy, required, tests, statement), site, tests


def test_an_echo_of_the_checks_own_input_is_selected_and_another_rows_is_a_guess():
    """clamp-like: the row (15, 10) expects 10, which its own input holds (an identity forger returns it): exposed.
    The row (4, 2) expects 2, which only another row writes as its input: a guess among the files' ints."""
    exposure, site, tests = _analyse([(15, 15), (4, 2), (2, 2), (7, 7), (9, 9)], {0: 15, 1: 3, 2: 2, 3: 7, 4: 9})
    assert (tests[1], 0) not in exposure.derived, exposure.derived
    guess = exposure.guesses[(tests[1], 0)]
    # 3 -> -3, 4, 2 transformed (2 the smallest: a forger trying the smallest first takes it), and 2 the smallest
    # of the file's numbers 15, 4, 2, 7, 9: 1 in 1 (of 3 and 5 at random)
    assert (guess.odds, guess.among) == (1, "the bug's value transformed"), guess
    exposure, _, tests = _analyse([((15, 0, 10), 10), ((4, 0, 10), 4)], {0: 15, 1: 4})
    assert "own inputs" in exposure.derived[(tests[0], 0)] and (tests[0], 0) not in exposure.guesses


def test_a_value_is_guessed_among_the_smallest_family_that_holds_it():
    transforms = {"plus one": lambda v: v + 1, "negated": lambda v: -v}
    assert value_odds(0, 5, (), [], transforms) == (1, "the usual defaults")  # 0 first of 0, 1, -1
    assert value_odds(-1, 5, (), [], transforms) == (3, "the usual defaults")  # last of 3
    assert value_odds(1, 0, (), [], transforms) == (1, "the bug's value transformed")  # 0 + 1 (and -0 is 0)
    # numbers only: 3, 12, 9 (12 second as written, last by size); the constant written most often comes first
    assert value_odds(12, 5, (3, 12, 9, "x", True), [], {}) == (2, "the graded files' constants")
    assert value_odds(12, 5, (3, 12, 9), [], {}, frequency={"number:12": 4, "number:3": 1}) == (
        1, "the graded files' constants")
    assert value_odds(12, 3, (3, 12, 9), [], {}) == (1, "the graded files' constants")  # the bug's own aside
    assert value_odds(12, 5, (3, 12, 9), [5, 12], {}) == (1, "the function's values under the bug")
    # of a function's many values, the one the files write (as a part of another check's input) is selected
    assert value_odds(16, 5, (), [5, 12, 13, 14, 15, 16], {}, written=[16]) == (
        1, "the function's values under the bug written in the files")
    assert value_odds(16, 5, (), [5, 12, 13, 14, 15, 16], {}) == (5, "the function's values under the bug")
    assert value_odds(False, True, (), [], {}) == (1, "the usual defaults")  # a yes/no: the opposite of the bug
    assert value_odds(77, 5, (3, 12), [5, 6], transforms) == (0, "")  # no family holds it: beyond a guess


def test_rows_split_per_bug_value_count_a_yes_no():
    """The forger must change exactly the wrong rows: C(N, s) ways for one answer; where every row of a bug value
    wants the other answer the bug's value determines it (1 way)."""
    assert ways([(True, False)] * 4 + [(False, True)] * 12) == math.comb(16, 4)
    assert ways([(True, False)] * 5) == 1
    assert ways([(True, 2)] * 2 + [(True, 3)] * 2 + [(False, 5)] * 2) == math.factorial(6) // 8


def test_a_yes_no_counts_only_where_the_bugs_value_does_not_decide_it():
    rows = [(n, n % 3 == 0) for n in range(1, 13)]
    flipped = {6: True, 9: True}  # n = 7, 10 said True too: 2 wrong among the 6 rows the bug says True
    bug = {i: flipped.get(i, w) for i, (_, w) in enumerate(rows)}
    exposure, site, tests = _analyse(rows, bug)
    guess = exposure.guesses[(tests[6], 0)]
    assert guess.odds == 1 and guess.ways == math.comb(6, 2), guess
    assert exposure.guesses[(tests[9], 0)].group == guess.group
    # every row the bug says True is wrong: "always False" wins them, 1 way
    exposure, _, tests = _analyse([(1, False), (2, False), (3, True)], {0: True, 1: True, 2: False})
    assert exposure.guesses[(tests[0], 0)].ways == 1
    # a row whose input the issue writes is known wrong: left out of the split (6 rows, 2 wrong -> 5, 1)
    exposure, _, tests = _analyse(rows, bug, statement="`f(7)` says True")
    assert exposure.guesses[(tests[9], 0)].ways == 5


def test_wrong_rows_a_feature_of_their_inputs_picks_out_are_a_short_split():
    """A flipped `<` fails exactly the rows whose two inputs are equal: a forger picks them out by that alone (one of
    SELECTORS), so the split is 1 in 3, not C(4, 2)."""
    rows = [((5, 5), True), ((3, 5), True), ((7, 5), False), ((0, 0), True), ((9, 2), False), ((1, 4), True)]
    bug = {0: False, 1: True, 2: False, 3: False, 4: False, 5: True}
    exposure, _, tests = _analyse(rows, bug)
    assert exposure.guesses[(tests[0], 0)].ways == 3
    rows[3], bug[3] = ((0, 4), True), False  # the wrong rows no longer share a feature: C(4, 2)
    exposure, _, tests = _analyse(rows, bug)
    assert exposure.guesses[(tests[0], 0)].ways == 6


def test_an_expected_value_the_issue_writes_is_exposed():
    """A forger reads the issue: 2, which another row writes as its input, is no guess once the issue says it."""
    exposure, _, tests = _analyse([(4, 2), (2, 2)], {0: 3, 1: 2})
    assert (tests[0], 0) in exposure.guesses
    exposure, _, tests = _analyse([(4, 2), (2, 2)], {0: 3, 1: 2}, statement="f(4) returns 3, expected 2")
    assert "issue" in exposure.derived[(tests[0], 0)] and not exposure.guesses


def _plan_odds(guesses: dict) -> list[str]:
    from tandem.envs.coding.exposure import Exposure
    from tandem.envs.coding.grading_plan import GradingPlan, _graded_by_guesses

    tests = sorted({t for t, _ in guesses})
    site = Site(0, "f", 1, "==", Reference({t: (1,) for t in tests}, held=True), "f(x)")
    plan = GradingPlan(files={}, sites={0: site}, host_graded={t: [] for t in tests})
    return _graded_by_guesses(plan, {t: [(0, 0)] for t in tests}, {0: site}, Exposure(guesses=guesses))


def test_a_task_is_graded_when_its_values_and_splits_together_are_long_odds():
    """Chance = the product over distinct values (one function's one value counts once, at its smallest odds) and
    over distinct splits (one per function and bug value)."""
    one_split = {(f"t::c[{i}]", 0): Guess(1, ("f", "bool:False"), ("f", "bool:True"), ways=924) for i in range(6)}
    assert _plan_odds(one_split)[-1].endswith("1 in 924 (graded from 1 in 1000)")
    two = {**one_split, ("t::c[9]", 0): Guess(1, ("f", "bool:True"), ("f", "bool:False"), ways=2)}
    assert not _plan_odds(two)
    alike = {(f"t::c[{i}]", 0): Guess(10 + i, ("f", "number:4"), ("f", f"number:{i}"), ways=1) for i in range(5)}
    assert "1 in 10 " in _plan_odds(alike)[-1]  # one value, five bug values: one guess at its smallest odds


GOOD_SOURCE = b"def good(n):\n    return n % 3 == 0\n"
GOOD_ROWS = [(n, n % 3 == 0) for n in range(1, 41)]
GOOD_TESTS = ("import pytest\n\nfrom pkg import good\n\n\n@pytest.mark.parametrize(\"n, want\", [\n"
              + "".join(f"    ({n}, {w}),\n" for n, w in GOOD_ROWS)
              + "])\ndef test_good(n, want):\n    assert good(n) == want\n").encode()
GOOD_BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
            "@@ -1,2 +1,2 @@\n def good(n):\n-    return n % 3 == 0\n+    return (n % 3 == 0) != (n % 7 == 0)\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_yes_no_task_graded_by_its_rows_pays_no_guess_forger(tmp_path, backend):
    """A bool function wrong on 5 of 40 rows in both directions (7, 14, 28, 35 said True; 21 said False): which rows
    to change is 1 in C(16, 4) * C(24, 1) = 43,680, so the task is graded (it was refused: every check a yes/no).
    The reference fix scores 1; every guess forger of tests/_guessers.py scores 0."""
    from bench.forge_rate import agent_diff
    from tests._guessers import FAMILIES, guesser_command
    from tests.test_reward_fidelity import _local_task

    ids = [f"tests/test_pkg.py::test_good[{n}-{w}]" for n, w in GOOD_ROWS]
    failing = [i for i, (n, _) in zip(ids, GOOD_ROWS) if n % 7 == 0]
    task = _local_task(tmp_path, {"pkg/__init__.py": GOOD_SOURCE, "tests/test_pkg.py": GOOD_TESTS}, GOOD_BUG,
                       failing, [i for i in ids if i not in failing], "`good(7)` says True; multiples of 7 are wrong")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        fixed = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
        forged = {f: runtime.grader.grade(task, agent_diff(runtime, task, guesser_command(f, task.problem_statement)))
                  for f in FAMILIES}
    finally:
        reset_runtime()
    assert not plan.refused, plan.refused
    assert len(plan.graded_by_guesses) == len(failing) == 5, plan.graded_by_guesses
    assert fixed.reward == 1.0, fixed.info()
    assert all(r.reward == 0.0 for r in forged.values()), {f: r.reason for f, r in forged.items()}
