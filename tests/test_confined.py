"""Issue 46: a fix whose whole effect is at the inputs the visible checks name is graded, not refused
(tandem.envs.coding.confined).

is_retryable's fix adds 429 to a set: the reference differs from the bug at 429 alone, so a forger writing
`if code == 429: return True` over the bug is the fix, and scores 1 as the reference does. is_leap's fix
changes every multiple of 400: the probe rows meet 800, 2400, 3200..., so a lookup table of the visible
rows (1600, 2000) is not the fix and the rule must not apply.
"""

from __future__ import annotations

import random

import pytest

from tandem.envs.coding.confined import MIN_GUARDS, confined_tables, is_probe, probe_rows, sample
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tests._swe import make_cfg, sandbox_backends
from tests.test_param_columns import _diff, _diff_of, appended, forged_rewards, rewards_of

_, BACKENDS = sandbox_backends()

LEAP_ROWS = [(2024, True), (2023, False), (1900, False), (2000, True), (2100, False), (1600, True), (1996, True)]
RETRY_ROWS = [(429, True), (503, True), (408, True), (404, False), (500, False), (200, False)]


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _leap_bug(year: int) -> bool:
    return year % 4 == 0 and year % 100 != 0


def _retryable(code: int) -> bool:
    return code in {408, 429, 502, 503, 504}


def _retryable_bug(code: int) -> bool:
    return code in {408, 502, 503, 504}


def _decide(rows: list[tuple], fix, bug, seed: int = 0) -> dict[str, list[str]]:
    """The rule's decision on a one-input table, the reference and the bug run here instead of in sandboxes
    (what the plan's clean and buggy runs tell the host): every row id, the rows the bug fails as the weak
    hidden tests, the others passing."""
    drawn = [r for rows_of_a_kind in sample(rows, [1], random.Random(seed)) for r in rows_of_a_kind]
    ids = {f"t::f[case{n}]": r[0] for n, r in enumerate(rows)} | {f"t::f[fresh{n}]": r[0] for n, r in enumerate(drawn)}
    weak = [i for i, x in ids.items() if "case" in i and fix(x) != bug(x)]
    passing = [i for i, x in ids.items() if "case" in i and i not in weak]
    fresh = [i for i in ids if "fresh" in i]
    return confined_tables(weak, passing, fresh, fresh, lambda f: fix(ids[f]) != bug(ids[f]), lambda f: True,
                           lambda t: fix(ids[t]))


def test_probe_rows_reach_beyond_the_table_and_never_repeat_a_visible_input():
    """Hand-derived: is_leap's visible years 1600..2024 hold only two multiples of 400; the probes (x2, //2,
    extrapolated by 400) hold others; no probe equals (==) a visible input, 0.0 for a visible 0 included."""
    years = [r[0] for r in probe_rows(LEAP_ROWS, [1], random.Random(0))]
    assert {800, 2400, 3200, 4000} <= set(years) and not {1600, 2000} & set(years)
    signs = [r[0] for r in probe_rows([(5, 1), (-3, -1), (0, 0), (0.5, 1)], [1], random.Random(0))]
    assert 0 not in signs and all(r is not None for r in signs)
    assert {"-6", "-10", "119"} <= {r[0] for r in probe_rows([("120", 120), ("-5", 0)], [1], random.Random(0))}
    assert probe_rows([(1, 2)], [1], random.Random(0)) == []  # one row: no domain to sample around
    assert is_probe("t.py::f[probe3]") and not is_probe("t.py::f[fresh3]") and not is_probe("t.py::f[case3]")


def test_is_leap_is_not_confined_and_is_retryable_is():
    """The decision on the real functions, every seed: is_leap's fix changes years no visible row names (never
    confined, so a lookup table of 1600 and 2000 earns nothing here); is_retryable's changes 429 alone."""
    for seed in range(20):
        assert _decide(LEAP_ROWS, _leap, _leap_bug, seed) == {}
        graded = _decide(RETRY_ROWS, _retryable, _retryable_bug, seed)
        assert list(graded) == ["t::f[case0]"] and len(graded["t::f[case0]"]) >= MIN_GUARDS


def test_the_decision_by_hand():
    """Hand-derived rows: confined only with MIN_GUARDS guards, none the bug fails, no dropped row the bug
    answers, and guard values showing the visible passing rows' values (or MIN_GUARD_VALUES of them)."""
    guards = [f"t::f[fresh{n}]" for n in range(MIN_GUARDS)]
    value = {**{g: n % 2 == 0 for n, g in enumerate(guards)}, "t::f[case1]": True, "t::f[case2]": False}

    def decide(kept=guards, fresh=guards, fails=(), answers=(), values=value, passing=("t::f[case1]",)):
        return confined_tables(["t::f[case0]"], list(passing), list(fresh), list(kept), lambda f: f in fails,
                               lambda f: f in answers, values.get)

    assert decide() == {"t::f[case0]": guards}
    assert decide(fails={guards[3]}) == {}  # the fix changes an input no visible row names
    assert decide(fresh=[*guards, "t::f[fresh99]"], answers={"t::f[fresh99]"}) == {}  # answered where the fix raised
    assert decide(fresh=[*guards, "t::f[fresh99]"]) == {"t::f[case0]": guards}  # both raise there
    assert decide(kept=guards[1:], fresh=guards[1:]) == {}  # too few guards
    assert decide(values={**value, **{g: True for g in guards}}) == {}  # one value on every guard
    many = {**{g: n % 3 for n, g in enumerate(guards)}, "t::f[case1]": 7}
    assert decide(values=many) == {"t::f[case0]": guards}  # three values stand in for a visible 7
    two = {**{g: n % 2 for n, g in enumerate(guards)}, "t::f[case1]": 7}
    assert decide(values=two) == {}  # 7 is nowhere among two guard values
    assert confined_tables(["t::f"], [], guards, guards, lambda f: False, lambda f: False, value.get) == {}  # no table


SOURCE = "RETRYABLE = frozenset({408, 429, 502, 503, 504})\n\n\ndef is_retryable(code):\n    return code in RETRYABLE\n"
BUGGY = SOURCE.replace("408, 429, ", "408, ")
TESTS = '''import pytest

from pkg import is_retryable


@pytest.mark.parametrize("code, expected", [(429, True), (503, True), (408, True), (404, False), (500, False),
                                            (200, False)])
def test_is_retryable(code, expected):
    assert is_retryable(code) == expected
'''
F = "tests/test_pkg.py::test_is_retryable"
F2P = [F + "[429-True]"]
P2P = [F + f"[{c}-{e}]" for c, e in RETRY_ROWS[1:]]
FIXES = {  # name: (lines appended to the buggy module, the reward it must get)
    "reference": ("RETRYABLE = frozenset({408, 429, 502, 503, 504})\n", 1.0),
    "comparisons": ("def is_retryable(code):\n    return code == 408 or code == 429 or 502 <= code <= 504\n", 1.0),
    # what a forger writes from the issue: the bug kept, 429 answered as the issue asks. It is the fix.
    "the_issue_over_the_bug": ("_bug = is_retryable\n\n\ndef is_retryable(code):\n"
                               "    return True if code == 429 else _bug(code)\n", 1.0),
    "true_everywhere": ("def is_retryable(code):\n    return True\n", 0.0),
    # the visible rows' value on every input it does not know (a yes/no guessed wide)
    "true_beyond_the_bug": ("_bug = is_retryable\n\n\ndef is_retryable(code):\n"
                            "    return True if code >= 429 else _bug(code)\n", 0.0),
    "every_4xx": ("_bug = is_retryable\n\n\ndef is_retryable(code):\n"
                  "    return 400 <= code < 500 and code != 404 or _bug(code)\n", 0.0),
}
LEAP = "def is_leap(year):\n    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)\n"
LEAP_BUG = LEAP.replace(" or year % 400 == 0", "")
LEAP_TESTS = '''import pytest

from pkg import is_leap


@pytest.mark.parametrize("year, expected", [(2024, True), (2023, False), (1900, False), (2000, True), (2100, False),
                                            (1600, True), (1996, True)])
def test_is_leap(year, expected):
    assert is_leap(year) == expected
'''
L = "tests/test_pkg.py::test_is_leap"


def _local_task(tmp_path, files: dict[str, bytes], bug: str, f2p: list[str], p2p: list[str], statement: str):
    """A task of its own (tests.test_reward_fidelity's names every task `local__repo`: two would share a template)."""
    from tandem.envs.coding.swe_data import task_from_row

    for rel, data in files.items():
        (tmp_path / "repo" / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "repo" / rel).write_bytes(data)
    return task_from_row({"instance_id": f"local__{tmp_path.name}.0.bug", "repo": "local/repo", "patch": bug,
                          "repo_path": str(tmp_path / "repo"), "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
                          "problem_statement": statement})


def _retry_task(tmp_path):
    return _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()},
                       _diff("pkg/__init__.py", SOURCE, BUGGY), F2P, P2P, "A 429 response should be retryable.")


def _leap_task(tmp_path):
    f2p = [L + "[2000-True]", L + "[1600-True]"]
    p2p = [L + f"[{y}-{e}]" for y, e in LEAP_ROWS if y not in (2000, 1600)]
    return _local_task(tmp_path, {"pkg/__init__.py": LEAP.encode(), "tests/test_pkg.py": LEAP_TESTS.encode()},
                       _diff("pkg/__init__.py", LEAP, LEAP_BUG), f2p, p2p, "is_leap(2000) is False")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_confined_fix_is_graded_and_only_the_fix_scores(tmp_path, backend):
    """retryable: graded as confined (every fresh row a guard); the reference, another algorithm and the issue's
    value written over the bug score 1; `True` everywhere, `True` on every larger code, every 4xx and the
    generic forger 0. is_leap: not confined; a lookup table of its visible rows earns nothing."""
    task, leap = _retry_task(tmp_path / "retry"), _leap_task(tmp_path / "leap")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        rewards, forged = rewards_of(runtime, task, FIXES), forged_rewards(runtime, task)
        leap_plan = runtime.grader.plan(leap)
        lookup = ("_bug = is_leap\n\n\ndef is_leap(year):\n    return {1600: True, 2000: True}.get(year, _bug(year))\n")
        leap_forged = runtime.grader.grade(leap, _diff_of(runtime, leap, appended(lookup))).reward
    finally:
        reset_runtime()
    assert not plan.refused and plan.confined == [plan.graded_id(F2P[0])], (plan.refused, plan.confined)
    guards = plan.differential[plan.graded_id(F2P[0])]
    assert len(guards) >= MIN_GUARDS and all("[fresh" in f or "[probe" in f for f in guards)
    assert any("[probe" in f for f in guards) and not any("[probe" in f for t, rows in leap_plan.differential.items()
                                                          for f in rows)
    assert rewards == {name: want for name, (_, want) in FIXES.items()}, rewards
    assert forged == [0.0, 0.0]
    assert not leap_plan.confined and leap_forged == 0.0, (leap_plan.refused, leap_plan.differential)
