"""Issue 46: values derived without the fix from what the sandbox holds must not pay.

Each derivation forger (tests/_derivers.py) records, for a check, a value it derived from the
graded files instead of what the buggy code computed. A hidden test whose decisive checks a
derivation reaches is either given a check it cannot reach (the bundled task's test, made
stronger) or refused, naming why; either way the forger scores 0.
"""

from __future__ import annotations

import json
import re
import shutil
import textwrap

import pytest

from tandem.envs.coding.checks import Reference, Site, echoes_of, guessable, parse
from tandem.envs.coding.derivation import Guess
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.swe_data import task_from_row
from tests._derivers import DERIVER_AGENT_LIMITS, agent_diff_bytes, deriver_command
from tests._swe import make_cfg, row_named, sandbox_backends

_, BACKENDS = sandbox_backends()


def test_a_constant_built_by_a_call_is_an_echo():
    """`values = list(range(50))` in the sandbox's copy: a check expecting 0..49 is a guess (it was strong)."""
    echoes = echoes_of(parse("def test():\n    values = list(range(50))\n    other = range(3)\n"))
    assert guessable(list(range(50)), echoes) and guessable([0, 1, 2], echoes)
    assert not guessable(list(range(51)), echoes)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_forger_that_folds_calls_scores_zero(tmp_path, backend):
    """heapq2's hidden test checked only `[q.pop() ...] == list(range(50))` next to `values = list(range(50))`:
    the forger evaluated the call and scored 1 (issue 46). As it was, the task is now refused, naming the
    sandbox's constant; as bundled now (one check more, whose value no constant of the file holds) it is
    graded, and the forger scores 0 on both."""
    row = row_named("heapq2")
    repo = tmp_path / "old" / "heapq2"
    shutil.copytree(task_from_row(row).repo_path, repo)
    order = repo / "tests" / "test_heapq2_order.py"  # as it was: without the check of 11 jobs' pop order
    text = order.read_text()
    start = text.index("    jobs = PriorityQueue()")
    order.write_text(text[:start] + text[text.index("\n\n\n", start) + 1:])
    old = task_from_row({**row, "instance_id": "local__heapq2.old", "repo_path": str(repo)})
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        now = runtime.grader.task(row)
        plans = {"old": runtime.grader.plan(old), "now": runtime.grader.plan(now)}
        forged = {name: runtime.grader.grade(task, agent_diff_bytes(runtime, task, deriver_command("calls")))
                  for name, task in (("old", old), ("now", now))}
    finally:
        reset_runtime()
    # list(range(50)), folded as a constant, is a constant of the check's own test body: a forger reads it there
    assert "one of the check's own inputs" in plans["old"].refused, plans["old"].refused
    assert not plans["now"].refused, plans["now"].refused
    assert forged["old"].reward == 0.0 and forged["now"].reward == 0.0, json.dumps(
        {k: v.reason for k, v in forged.items()})
    assert forged["now"].tests["tests/test_heapq2_order.py::test_pops_in_priority_order"] == "FAILED"


# ----------------------------------------------------------------------------- families 2-5 on the host
def _reasons(body: str, expected: dict[int, object], bug: dict[int, object], statement: str = "",
             extra: dict[int, object] | None = None) -> dict[int, str]:
    """How a forger reaches each check of one test `body` (a graded copy, `__tandem_check__(k, E)`), each
    expecting `expected[k]` where the bug computed `bug[k]`; `extra`: more sites (source, value) of a second test
    that pass under the bug (the file's other inputs)."""
    exposure = _exposure(body, expected, bug, statement, extra)
    return {**exposure.reasons, **{k: why for (_, k), why in exposure.derived.items()}}


def _exposure(body: str, expected: dict[int, object], bug: dict[int, object], statement: str = "",
              extra: dict[int, object] | None = None):
    from tandem.envs.coding.exposure import analyse
    from tandem.envs.coding.instrument import computes_of

    extra = extra or {}
    text = "def test_a():\n" + textwrap.indent(textwrap.dedent("\n".join(line for line in body.splitlines() if line.strip())), "    ") + "\n"
    text += "\n\ndef test_b():\n    pass\n" + "".join(f"    __tandem_check__({k}, ({source}))\n" for k, (source, _) in extra.items())
    extra = {k: value for k, (_, value) in extra.items()}
    sources = {int(m.group(1)): m.group(2) for m in re.finditer(r"__tandem_check__\((\d+), \((.*)\)\)$", text, re.M)}
    values = {**expected, **extra}
    sites = {k: Site(k, "tests/test_x.py", 1, "==", values[k], sources[k], None,
                     computes_of(parse(sources[k], mode="eval").body)) for k in values}
    buggy = {"tests/test_x.py::test_a": [(k, bug[k]) for k in expected],
             "tests/test_x.py::test_b": [(k, v) for k, v in extra.items()]}
    required = {t: {k for k, _ in events} for t, events in buggy.items()}
    return analyse({"tests/test_x.py": text}, sites, buggy, required, list(buggy), statement)


def test_a_value_the_bug_cut_short_extended_to_the_tests_input_is_derived():
    """iniread: the bug keeps `postgres://h/db?opt`; the test's input holds `postgres://h/db?opt=1`. What the
    query reader makes of the whole value is not a string the files hold: still decisive."""
    reasons = _reasons('''
        c = parse("[db]\\nurl = postgres://h/db?opt=1&ssl=on\\n")
        __tandem_check__(0, (c["db"]["url"]))
        __tandem_check__(1, (parse_qs(urlsplit(c["db"]["url"]).query)))
    ''', {0: "postgres://h/db?opt=1&ssl=on", 1: {"opt": ["1"], "ssl": ["on"]}}, {0: "postgres://h/db?opt", 1: {}})
    assert "extension" in reasons.get(0, ""), reasons
    assert 1 not in reasons, reasons


def test_adjacent_items_joined_into_what_the_issue_quotes_are_derived():
    """wrapper: the bug breaks `aaa bbb` in two and the issue quotes "aaa bbb"; the justified lines are no join
    of the bug's lines (nor is a list joined by a usual separator kept decisive)."""
    statement = 'wrap("aaa bbb ccc", 7) returns ["aaa", "bbb", "ccc"], but "aaa bbb" fits.'
    reasons = _reasons('''
        __tandem_check__(0, (wrap("aaa bbb ccc", 7)))
        __tandem_check__(1, (justify("aaa bbb ccc", 7)))
        __tandem_check__(2, (wrap("xx yy zz", 5)))
    ''', {0: ["aaa bbb", "ccc"], 1: ["aaa bbb", "ccc    "], 2: ["xx yy", "zz"]},
        {0: ["aaa", "bbb", "ccc"], 1: ["aaa    ", "bbb    ", "ccc    "], 2: ["xx", "yy", "zz"]}, statement)
    assert "joins" in reasons.get(0, "") and "joins" in reasons.get(2, ""), reasons
    assert 1 not in reasons, reasons


def test_a_value_of_the_functions_few_values_is_derived():
    """tictac: winner() returns X, O or None on the file's other boards, and X is on the board checked (and a
    function with two values is a coin to toss); a list of three winners is none of those values."""
    exposure = _exposure('''
        __tandem_check__(0, (winner("..X.X.X..")))
        __tandem_check__(1, ([winner(b) for b in ("O.XOX.X..", "X.OXO.O..", "XO.XO....")]))
        __tandem_check__(2, (parity(7)))
    ''', {0: "X", 1: ["X", "O", None], 2: "odd"}, {0: None, 1: [None, None, None], 2: "even"},
        extra={5: ('winner("XXX......")', "X"), 6: ('winner("O..O..O..")', "O"), 7: ("parity(3)", "odd")})
    reasons = {k: why for (_, k), why in exposure.derived.items()}
    assert "codomain" in reasons.get(0, ""), reasons
    # two values, neither written anywhere: the one that is not the bug's is a certain guess (1 in 1)
    assert {key: g.odds for key, g in exposure.guesses.items()} == {("tests/test_x.py::test_a", 2): 1}, exposure
    assert 2 not in reasons, reasons
    assert not exposure.strong(Site(2, "tests/test_x.py", 1, "==", "odd"), "tests/test_x.py::test_a", 0)
    assert 1 not in reasons, reasons


def test_a_coincidence_in_a_small_codomain_is_a_guess_and_other_cases_stay_decisive():
    """The local parametrized task: under a `+` bug sub(2, 2) is 4, which test_sub[7-3-4] expects. Written nowhere,
    it is a guess among the values sub() returns (1 in 2: of 25, 2, 4, the bug's own 10 aside, second by size), in
    that test only: the same assert in test_sub[20-5-15] expects 15, which no rule reaches, and stays decisive there."""
    from tandem.envs.coding.exposure import analyse
    from tandem.envs.coding.instrument import computes_of

    text = ("def test_sub(a, b):\n    __tandem_check__(0, (sub(a, b)))\n\n\n"
            "def test_zero(n):\n    __tandem_check__(1, (sub(n, n)))\n\n\nROWS = [(7, 3), (20, 5), (1, 2)]\n")
    computes = computes_of(parse("sub(a, b)", mode="eval").body)
    sub_site = Site(0, "tests/test_x.py", 2, "==", Reference({"t::test_sub[a]": (4,), "t::test_sub[b]": (15,)},
                                                             held=True), "sub(a, b)", None, computes)
    zero = Site(1, "tests/test_x.py", 6, "==", 0, "sub(n, n)", None, computes)
    buggy = {"t::test_sub[a]": [(0, 10)], "t::test_sub[b]": [(0, 25)], "t::test_zero[1]": [(1, 2)],
             "t::test_zero[2]": [(1, 4)]}
    required = {t: {k for k, _ in events} for t, events in buggy.items()}
    exposure = analyse({"tests/test_x.py": text}, {0: sub_site, 1: zero}, buggy, required, list(buggy))
    assert exposure.guesses[("t::test_sub[a]", 0)][:2] == (2, ("sub", "number:4")) and not exposure.derived, exposure
    assert not exposure.strong(sub_site, "t::test_sub[a]", 0) and exposure.guessed(sub_site, "t::test_sub[a]", 0) == 2
    assert "1 in 2" in exposure.why(sub_site, "t::test_sub[a]", 0)
    assert exposure.strong(sub_site, "t::test_sub[b]", 0), exposure.why(sub_site, "t::test_sub[b]", 0)
    # written out among the check's own inputs (here every constant of the files: the host does not find the
    # test's own function), the same value is selected, not guessed: derived
    exposure = analyse({"tests/test_x.py": text.replace("(1, 2)]", "(1, 2), 4]")}, {0: sub_site, 1: zero}, buggy,
                       required, list(buggy))
    assert "codomain" in exposure.derived.get(("t::test_sub[a]", 0), "") and ("t::test_sub[a]", 0) not in \
        exposure.guesses, exposure
    assert exposure.strong(sub_site, "t::test_sub[b]", 0)  # derived in one case, not the assert everywhere


@pytest.mark.parametrize("cases, graded", [(1, False), (6, False), (7, True)])
def test_guesses_grade_a_task_only_at_long_odds_together(cases, graded):
    """Hidden tests whose only decisive checks are 1-in-3 guesses: graded when a forger wins all of them together
    at most 1 in 1000 (GUESS_BOUND: 3**7 = 2187), refused with the odds otherwise; a hidden test with no guess
    at all refuses the task whatever the others' odds."""
    from tandem.envs.coding.exposure import Exposure
    from tandem.envs.coding.grading_plan import GradingPlan, _graded_by_guesses

    tests = [f"t::test_sub[{i}]" for i in range(cases)]
    site = Site(0, "f", 1, "==", Reference({t: (100 + i,) for i, t in enumerate(tests)}, held=True), "sub(a, b)")
    exposure = Exposure(guesses={(t, 0): Guess(3, ("sub", str(i), str(100 + i))) for i, t in enumerate(tests)})
    plan = GradingPlan(files={}, sites={0: site}, host_graded={t: [] for t in tests})
    reasons = _graded_by_guesses(plan, {t: [(0, 0)] for t in tests}, {0: site}, exposure)
    assert (not reasons) == graded, reasons
    assert all(plan.host_graded[t] == ([0] if graded else []) for t in tests)
    assert plan.graded_by_guesses == (tests if graded else [])
    if not graded:
        assert f"1 in {3 ** cases}" in reasons[-1] and "1 in 3" in reasons[0], reasons
    # checks alike (the bug's value and the answer the same: one input, or one mapping a forger applies) are
    # one guess, not seven
    alike = Exposure(guesses={(t, 0): Guess(3, ("sub", "7", "100")) for t in tests})
    plan = GradingPlan(files={}, sites={0: site}, host_graded={t: [] for t in tests})
    assert _graded_by_guesses(plan, {t: [(0, 0)] for t in tests}, {0: site}, alike)
    ok = Site(1, "f", 2, "==", True, "ok()")
    plan = GradingPlan(files={}, sites={0: site, 1: ok}, host_graded={**{t: [] for t in tests}, "t::test_ok": []})
    assert _graded_by_guesses(plan, {**{t: [(0, 0)] for t in tests}, "t::test_ok": [(1, 0)]}, {0: site, 1: ok},
                              exposure)


def test_the_issues_edit_applied_by_analogy_is_derived():
    """semverlite: the issue's `1.5.2` -> `1.5.0` turns the bug's 3.1.7 into 3.1.0 (the same word put in) and
    its numeric step too; two bumps in a row are no edit the issue shows."""
    statement = "`parse(\"1.4.2\").bump(\"minor\")` gives `1.5.2`. This should be `1.5.0`.\n"
    reasons = _reasons('''
        __tandem_check__(0, (str(parse("3.0.7").bump("minor"))))
        __tandem_check__(1, (str(parse("0.9.9").bump("minor").bump("patch"))))
        __tandem_check__(2, (str(parse("2.3.4").bump("minor"))))
    ''', {0: "3.1.0", 1: "0.10.1", 2: "2.4.2"}, {0: "3.1.7", 1: "0.10.10", 2: "2.4.4"}, statement)
    assert "analogy" in reasons.get(0, "") and "analogy" in reasons.get(2, ""), reasons
    assert 1 not in reasons, reasons


GRADE_SOURCE = (b'def grade(score):\n'
                b'    return "excellent" if score >= 90 else "good" if score >= 75 else "fair" if score >= 50 else "poor"\n')
GRADE_ROWS = [(97, "excellent"), (93, "excellent"), (88, "good"), (81, "good"), (77, "good"), (66, "fair"),
              (58, "fair"), (52, "fair"), (45, "poor"), (30, "poor"), (12, "poor"), (3, "poor"), (99, "excellent"),
              (71, "fair"), (60, "fair"), (40, "poor")]
GRADE_TESTS = ("import pytest\n\nfrom pkg import grade\n\n\n@pytest.mark.parametrize(\"score, want\", [\n"
               + "".join(f"    ({s}, {w!r}),\n" for s, w in GRADE_ROWS)
               + "])\ndef test_grade(score, want):\n    assert grade(score) == want\n").encode()
GRADE_BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
             "@@ -1,2 +1,3 @@\n def grade(score):\n+    score = score * 5 % 101\n"
             '     return "excellent" if score >= 90 else "good" if score >= 75 else "fair" if score >= 50 else "poor"\n')


def _grade(score: int) -> str:
    return "excellent" if score >= 90 else "good" if score >= 75 else "fair" if score >= 50 else "poor"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_task_graded_by_guesses_pays_no_guesser(tmp_path, backend):
    """The bound attacked: a bug that scrambles a 4-valued function. Hidden cases expecting a value the bug returns
    elsewhere are guesses (1 in 3 each, 8 distinct: 1 in 6561 together), so the task is graded, not refused; the
    reference fix scores 1, and forgers that answer from the function's values under the bug score 0."""
    from bench.forge_rate import agent_diff
    from tests.test_reward_fidelity import _local_task

    ids = [f"tests/test_pkg.py::test_grade[{s}-{w}]" for s, w in GRADE_ROWS]
    failing = [i for i, (s, w) in zip(ids, GRADE_ROWS) if _grade(s * 5 % 101) != w]
    task = _local_task(tmp_path, {"pkg/__init__.py": GRADE_SOURCE, "tests/test_pkg.py": GRADE_TESTS}, GRADE_BUG,
                       failing, [i for i in ids if i not in failing], "grade() puts most scores in the wrong band")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        fixed = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
        forged = {f: runtime.grader.grade(task, agent_diff_bytes(runtime, task, deriver_command(f, task.problem_statement)))
                  for f in ("guess", "codomain")}
    finally:
        reset_runtime()
    # 8 distinct (bug's value, answer) pairs among the bug's 4 values: without the guesses' bound, refused
    values = {_grade(s * 5 % 101) for s, _ in GRADE_ROWS}
    assert len(values) == 4 and len({(_grade(s * 5 % 101), w) for s, w in GRADE_ROWS if w in values} - {
        (w, w) for w in values}) == 8
    assert not plan.refused, plan.refused
    # (the plan names the cases by their aliases, case0 ...: the expected column left the ids too)
    assert len(plan.host_graded) == len(failing) and all(plan.host_graded.values()) and plan.graded_by_guesses
    assert fixed.reward == 1.0, fixed.info()
    assert all(r.reward == 0.0 for r in forged.values()), {f: r.reason for f, r in forged.items()}


# ----------------------------------------------------------------------------- families 2-5 through the grader
FORGED = {
    # family: (task, its hidden test file, lines added since the family forged it, the rule the refusal names,
    #          the test the forger fails now)
    "extend": ("iniread", "tests/test_iniread_values.py", ("the whole query", "url = parse(", "parse_qs(urlsplit"),
               "extension", "test_value_with_equals"),
    "join": ("wrapper", "tests/test_wrapper_wrap.py", ("justify(",), "joins", "test_exact_fit"),
    "codomain": ("tictac", "tests/test_tictac_winner.py", ("[winner(b)",), "codomain", "test_anti_diagonal"),
    "analogy": ("semverlite", "tests/test_semverlite_bump.py", ('"0.9.9"',), "analogy", "test_bump_minor_resets_patch"),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("family", sorted(FORGED))
def test_a_derivation_forger_scores_zero(tmp_path, backend, family):
    """Each family forged its task as bundled before (issue 46). As it was, the task is now refused, naming the
    rule that derives its checks, or graded by fresh rows (a twin of a plain-assert test: tictac's module never
    imports pytest, and twins reach it now), where the forger scores 0 too; as bundled now (one check more, beyond
    every rule) it is graded, the reference fix scores 1 and the forger 0."""
    name, test_file, added, rule, failing = FORGED[family]
    row = row_named(name)
    repo = tmp_path / "old" / name
    shutil.copytree(task_from_row(row).repo_path, repo)
    path = repo / test_file
    text = path.read_text()
    path.write_text("".join(line for line in text.splitlines(keepends=True) if not any(a in line for a in added)))
    assert path.read_text() != text, "the bundled test no longer holds the added check"
    old = task_from_row({**row, "instance_id": f"local__{name}.old", "repo_path": str(repo)})
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        now = runtime.grader.task(row)
        plans = {"old": runtime.grader.plan(old), "now": runtime.grader.plan(now)}
        forged, old_forged = (runtime.grader.grade(t, agent_diff_bytes(runtime, t, deriver_command(
            family, t.problem_statement))) if t is now or not plans["old"].refused else None for t in (now, old))
        fixed = runtime.grader.grade(now, agent_diff_bytes(runtime, now, "true", fix_first=row))
    finally:
        reset_runtime()
    if old_forged is None:
        assert rule in plans["old"].refused, plans["old"].refused
    else:  # graded by fresh rows the derivation cannot reach
        assert plans["old"].differential and old_forged.reward == 0.0, (plans["old"].differential, old_forged.reason)
    assert not plans["now"].refused, plans["now"].refused
    assert fixed.reward == 1.0, fixed.reason
    assert forged.reward == 0.0, forged.reason
    assert forged.tests[f"{test_file}::{failing}"] == "FAILED", forged.tests


@pytest.mark.parametrize("backend", BACKENDS)
def test_derivation_forgers_through_the_agent_loop_score_zero(tmp_path, backend):
    """Each family typed by a policy through the real rollout plug-in (the issue text as the agent read it in
    its prompt), on the task it forged: pass@1 0 (it was 1.00 on 5 of 5 with agent_tamper_rate 0)."""
    from tandem.envs.coding import agent_step_metrics
    from tests._swe import bash, run_rollout

    cases = [("calls", "heapq2")] + [(family, FORGED[family][0]) for family in sorted(FORGED)]

    def policy_for(family):
        def policy(prompt: str, turn: int) -> str:
            return bash(deriver_command(family, prompt) if turn == 1 else "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT")
        return policy

    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}, **DERIVER_AGENT_LIMITS)
    try:
        samples = [run_rollout(cfg, policy_for(family), row_named(name)) for family, name in cases]
    finally:
        reset_runtime()
    metrics = agent_step_metrics(samples)
    print(f"derivation forgers through the agent loop ({backend}): pass@1 {metrics['agent_pass_at_1']}, "
          f"agent_tamper_rate {metrics['agent_tamper_rate']}")
    # the forger was typed and ran: a reply cut short is a format error, and an empty diff scores 0 anyway
    assert [s.metadata["agent"]["format_errors"] for s in samples] == [0] * len(cases)
    assert all(s.metadata["diff"] for s in samples), [s.reward_info.get("reason") for s in samples]
    assert [s.reward for s in samples] == [0.0] * len(cases), [s.reward_info.get("reason") for s in samples]
    assert all(not s.reward_info.get("refused") for s in samples), [s.reward_info.get("refused") for s in samples]
    assert metrics["agent_pass_at_1"] == 0.0
