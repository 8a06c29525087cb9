"""Hidden checks judged on the host: the split keeps expectations out of the sandbox, judges as the
original asserts do, and a task that cannot be graded this way is refused with the reason.

- the split (tandem.envs.coding.instrument): no expected value of a split check is left in the graded file,
  every line stays where it was, and the file still runs;
- equivalence: for every form (module functions, class methods, fixtures, parametrize, raises,
  approx, unittest), on correct and on wrong code, the host's verdict from the split file equals
  pytest's verdict on the original file (a real pytest run with tandem's reporter on a pipe);
- values from the sandbox: decoding refuses what no honest encoder writes; constants fold within
  bounds; guessable expectations are told apart;
- the forms whose hidden tests had no twin in round 1 (tests/_forms.py), through the real
  grader on each backend: graded by the host (the fix scores 1, the generic forger 0 in every
  trial) or refused with the reason;
- round 2 (issue 34's red team): an `E == R` check holds R's reference value on the host and
  never puts R in a graded copy; honest values of other types than the plain ones (numpy
  scalars, Fraction, namedtuple, IntEnum, ...) are judged as the original assert judges them;
  the records are judged in a limited child process; no expectation leaves the host's judging
  code (reward_info, logs, refusals).
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tandem.envs.coding.checks import Malformed, NotConstant, Site, constant, decode, guessable, parse
from tandem.envs.coding.grading import GRADER_DIR, get_runtime, reset_runtime
from tandem.envs.coding.instrument import find_sites, rewrite
from tandem.envs.coding.raising_rows import GENERATED
from tandem.envs.coding.swe_data import task_from_row
from tandem.envs.coding.verdict import judge, parse_pytest_report, parse_stream
from tests._forger import forger_command
from tests._forms import FORMS, form_row, write_repo
from tests._swe import make_cfg, row_named, sandbox_backends

_, BACKENDS = sandbox_backends()

LIB = '''
def double(x):
    return x * 2


def parse(text):
    if not text.isdigit():
        raise ValueError(f"not a number: {text!r}")
    return int(text)


def stats(xs):
    return {"n": len(xs), "mean": sum(xs) / len(xs), "set": set(xs), "pair": (min(xs), max(xs))}
'''
WRONG = LIB.replace("x * 2", "x * 2 + (x == 3)").replace("sum(xs) / len(xs)", "sum(xs) / (len(xs) + 1)")
TESTS = '''
import unittest

import pytest

from lib import double, parse, stats


def test_literal():
    assert double(2) == 4
    assert 6 == double(3)


def test_containers():
    s = stats([1, 2, 3, 3])
    assert s["set"] == {1, 2, 3} and s["n"] == 4
    assert s["pair"] == (1, 3)
    assert s["mean"] == pytest.approx(2.25)
    assert s["mean"] < 10


@pytest.fixture
def numbers():
    return [2, 3]


def test_fixture(numbers):
    assert [double(n) for n in numbers] == [4, 6]


@pytest.mark.parametrize("n", [1, 3])
def test_param(n):
    assert double(n) in (2, 6)


class TestClass:
    def test_method(self):
        assert double(10) == 20
        assert not double(0)


def test_raises():
    with pytest.raises(ValueError, match="not a number"):
        parse("x1")
    assert parse("17") == 17


class TestUnit(unittest.TestCase):
    def test_eq(self):
        self.assertEqual(double(3), 6)
        self.assertAlmostEqual(stats([1, 2])["mean"], 1.5)


def test_computed_expectation():
    assert double(3) == double(1) * 3
    self_check = [double(n) for n in (1, 2)]
    assert self_check == [2, 2 * 2]


@pytest.mark.parametrize("n, want", [(2, 4), (3, 2 * 3)])
def test_param_expectation(n, want):
    assert double(n) == want
'''


def run_pytest(root: Path, files: list[str], reporter: bool) -> tuple[str, bytes]:
    """pytest on `files` in `root` (optionally with tandem's reporter on a pipe): (stdout, stream)."""
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{GRADER_DIR}:{root}", "PYTHONDONTWRITEBYTECODE": "1"}
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "-q", "--tb=no", *files]
    read_end = write_end = -1
    if reporter:
        read_end, write_end = os.pipe()
        env["TANDEM_REPORT_FD"] = str(write_end)
        argv[3:3] = ["-p", "tandem_report"]
    proc = subprocess.Popen(argv, cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            pass_fds=(write_end,) if reporter else ())
    if reporter:
        os.close(write_end)
        with os.fdopen(read_end, "rb") as side:
            stream = side.read()
    else:
        stream = b""
    out = proc.communicate(timeout=300)[0].decode()
    return out, stream


def test_split_keeps_expectations_out_and_lines_in_place():
    from tandem.envs.coding.checks import Reference

    sites = find_sites(TESTS, "tests/test_x.py", 0)
    text = rewrite(TESTS, sites)
    assert sum(len(c.sites) for c in sites) >= 18 and text.count("\n") == TESTS.count("\n") + 1
    for expected in ("== 4", "6 ==", "{1, 2, 3}", "(1, 3)", "approx(2.25)", "[4, 6]", "(2, 6)", "== 20",
                     "not a number", "== 17", ", 6)", "1.5)", "double(1) * 3", "== want"):
        assert expected not in text, expected
    # `E == R`: R is computed by the reference fix's run only (its copy), never by a graded copy
    reference = rewrite(TESTS, sites, with_references=True)
    assert "double(1) * 3" in reference and "(want))" in reference and "__tandem_check__" in reference
    by_source = {s.source: s for c in sites for s in c.sites}
    assert isinstance(by_source["double(3)"].expected, Reference) and not by_source["double(3)"].expected.stored
    assert by_source["double(n)"].expected.stored  # `want` is a value the test holds: the sandbox has it
    assert not any("==" in s.source or "approx" in s.source for s in by_source.values())  # no expectation shown
    original_lines, new_lines = TESTS.splitlines(), text.splitlines()
    for site in (s for c in sites for s in c.sites):  # each check is replaced on its own line
        assert "__tandem_" in new_lines[site.line - 1] and "__tandem_" not in original_lines[site.line - 1]
    parse(text)


@pytest.mark.parametrize("code", ["correct", "wrong"])
def test_host_verdicts_equal_pytests_on_the_original(tmp_path, code):
    """Every form, on correct and on wrong code: the split file judged on the host says what pytest says."""
    from tandem.envs.coding.grading_plan import _with_references

    (tmp_path / "tests").mkdir()
    (tmp_path / "lib.py").write_text(LIB if code == "correct" else WRONG)
    (tmp_path / "tests" / "test_x.py").write_text(TESTS)
    original = parse_pytest_report(run_pytest(tmp_path, ["tests/test_x.py"], reporter=False)[0])
    candidates = find_sites(TESTS, "tests/test_x.py", 0)
    sites = {s.k: s for c in candidates for s in c.sites}
    # as in a grading plan: the correct code's run (R of `E == R` too) gives required sites and references
    (tmp_path / "tests" / "test_x.py").write_text(rewrite(TESTS, candidates, with_references=True))
    (tmp_path / "lib.py").write_text(LIB)
    reference = parse_stream(run_pytest(tmp_path, ["tests/test_x.py"], reporter=True)[1], sites, references=True)
    sites.update(_with_references(sites, reference, list(original)))
    (tmp_path / "lib.py").write_text(LIB if code == "correct" else WRONG)
    (tmp_path / "tests" / "test_x.py").write_text(rewrite(TESTS, candidates))
    out, side = run_pytest(tmp_path, ["tests/test_x.py"], reporter=True)
    stream = parse_stream(side, sites)
    required = {t: {k for k, _ in events} for t, events in reference.checks.items()}
    verdict = judge(list(original), stream, 0 if "failed" not in out else 1, out, sites, required)
    assert verdict.tamper == [] and set(original) == set(verdict.tests)
    assert verdict.tests == original, (verdict.check_failures, out[-2000:])
    assert (code == "correct") == all(s == "PASSED" for s in original.values())


def test_decoding_refuses_what_no_encoder_writes():
    assert decode({"t": [1, {"s": [2]}, {"d": [[{"f": [3]}, {"c": [1.0, 2.0]}]]}]}) == (1, {2}, {frozenset({3}): 1 + 2j})
    for bad in ({"zz": 1}, {"t": 1}, {"d": [[1]]}, {"s": [[1]]}, {"t": [1], "s": [2]}, {"d": [[[1], 2]]}):
        with pytest.raises(Malformed):
            decode(bad)
    deep: list = []
    for _ in range(150):
        deep = [deep]
    with pytest.raises(Malformed):
        decode(deep)
    opaque = decode({"o": "lib.Thing"})
    assert not Site(0, "f", 1, "!=", 3).passes(opaque) and not Site(0, "f", 1, "falsy", None).passes(opaque)


def test_constants_fold_within_bounds_and_guesses_are_told_apart():
    from tandem.envs.coding.checks import Reference

    def fold(text):
        return constant(ast.parse(text, mode="eval").body)

    assert fold("'x' * 3 + 'y'") == "xxxy" and fold("list(range(4))") == [0, 1, 2, 3] and fold("-(2 ** 3)") == -8
    started = time.monotonic()
    for huge in ("'x' * 10 ** 9", "list(range(10 ** 12))", "2 ** 10 ** 9", "f(1)", "x == 1", "[y]"):
        with pytest.raises((NotConstant, ArithmeticError)):
            fold(huge)
    assert time.monotonic() - started < 120  # bounded: evaluated, any of them would take hours
    for weak in (True, None, 0, -1, "", [], [True, False], 2.0):
        assert guessable(weak, echoes=(2,))
    for strong in (3, "1.5.0", [6, 16], (0, 300), {"a": ["1", "3"]}):
        assert not guessable(strong, echoes=(2, "2"))
    assert Site(0, "f", 1, "==", [6, 16]).strong_against() and not Site(0, "f", 1, "!=", [6, 16]).strong_against()
    assert not Site(0, "f", 1, "==", True).strong_against() and not Site(0, "f", 1, "==", 3).strong_against((3,))
    assert Site(0, "f", 1, "in", ("apple", "apply")).strong_against()
    assert not Site(0, "f", 1, "in", ("apple", "apply")).strong_against(("apple",))
    held = Site(0, "f", 1, "==", Reference({"t": (7, 8)}))
    assert held.strong_against((), "t", 1) and not held.strong_against((8,), "t", 1) and not held.strong_against((), "t", 2)
    assert not Site(0, "f", 1, "==", Reference({"t": (7,)}, stored=True)).strong_against((), "t", 0)


def test_the_issue_texts_literals_are_echoes():
    """What the problem statement writes out (numbers, quoted strings, code and the literals in it) is what the
    agent reads: a check expecting one of them is not strong, and says why; a value it does not write is."""
    from tandem.envs.coding.checks import Reference
    from tandem.envs.coding.exposure import Exposure, stated_values

    issue = ("`median([4, 1, 3, 2])` returns 3.5 instead of 2.5, `parse(\"1.4.2\")` gives `1.5.2` (want\n"
             "`1.5.0`), \"http_server_error\" is expected, and a count of 12 is 1 too many.\n"
             "```python\nmerge([(1, 10), (2, 3)])  # [(1, 10)]\n```\n")
    stated = stated_values(issue)
    for value in ([4, 1, 3, 2], 2.5, 3.5, "1.5.0", "http_server_error", 12, [(1, 10), (2, 3)], (1, 10), 4):
        assert any(type(w) is type(value) and w == value for w in stated), (value, stated)
    exposure = Exposure(echoes=(7,), stated=stated)
    said = Site(0, "f", 1, "==", 2.5, "median([4, 1, 3, 2])")
    assert not exposure.strong(said, "t", 0) and exposure.why(said, "t", 0) == "the issue text writes out its expected value"
    assert not exposure.strong(Site(1, "f", 2, "==", 2), "t", 0)  # 2 == 2.0 as the host judges: an int passes
    assert exposure.strong(Site(2, "f", 3, "==", 5.5), "t", 0) and exposure.strong(Site(3, "f", 4, "==", "1.6.0"), "t", 0)
    computed = Site(4, "f", 5, "==", Reference({"t": (9, "1.5.0")}))
    assert exposure.strong(computed, "t", 0) and not exposure.strong(computed, "t", 1)
    assert "a guess" in exposure.why(Site(5, "f", 6, "==", 7))  # the sandbox's echo is named as such


@pytest.fixture(scope="module")
def forms_repo(tmp_path_factory):
    return write_repo(tmp_path_factory.mktemp("shapes"))


@pytest.mark.parametrize("backend", BACKENDS)
def test_forms_without_twins_are_graded_by_the_host_or_refused(tmp_path, backend, forms_repo):
    """Issue 34's no-twin forms: the host grades them (fix 1, generic forger 0 in every trial) or refuses them."""
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    outcome = {}
    try:
        for name, (_, _, expected) in FORMS.items():
            task = task_from_row(form_row(forms_repo, name))
            plan = runtime.grader.plan(task)
            fix = runtime.grader.grade(task, _agent_diff(runtime, task, reverse=True))
            forged = [runtime.grader.grade(task, _agent_diff(runtime, task, forger_command(i))).reward
                      for i in range(4)] if expected == "graded" else []
            outcome[name] = (plan.refused, fix, forged)
    finally:
        reset_runtime()
    for name, (refused, fix, forged) in outcome.items():
        expected = FORMS[name][2]
        if expected == "graded":
            assert not refused and fix.reward == 1.0 and forged == [0.0] * 4, (name, refused, fix.reason, forged)
        else:
            assert expected in refused and fix.reward == 0.0 and fix.refused == refused, (name, refused)
            assert all(f"::{t}" in refused for t in FORMS[name][1][:1]), refused
            checks = [line.strip() for line in FORMS[name][0].splitlines() if line.strip().startswith(("assert", "with"))]
            assert not any(check in refused for check in checks), refused  # what it computes, never what it expects
    assert runtime.grader.refused and len(runtime.grader.refused) == sum(e != "graded" for *_, e in FORMS.values())


def _agent_diff(runtime, task, command: str = "", reverse: bool = False) -> str:
    from tandem.envs.coding.swe_data import apply_patch

    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        if reverse:
            apply_patch(sb.testbed, task.patch, reverse=True)
        if command:
            assert sb.exec(command).returncode == 0
        return sb.diff()


def test_stream_json_is_what_the_encoder_writes():
    """The sandbox's encoder and the host's decoder agree on every plain type (a real round trip)."""
    code = textwrap.dedent('''
        import json, sys
        sys.path.insert(0, sys.argv[1])
        import types
        sys.modules["tandem_report"] = types.SimpleNamespace(emit=lambda r: print(json.dumps(r)), current_test=lambda: "t")
        import tandem_checks
        for v in [1, -2.5, float("inf"), "é\\ud800", b"\\xff", [1, (2, {3})], {"k": frozenset({4})}, 1j, True, None]:
            tandem_checks.check(0, v)
        tandem_checks.check(1, object())
    ''')
    out = subprocess.run([sys.executable, "-c", code, str(GRADER_DIR)], capture_output=True, text=True, check=True)
    values = [decode(json.loads(line)["v"]) for line in out.stdout.splitlines()]
    assert values[:-1] == [1, -2.5, float("inf"), "é\ud800", b"\xff", [1, (2, {3})], {"k": frozenset({4})}, 1j, True,
                           None]
    assert type(values[-1]).__name__ == "Opaque"


def test_values_of_other_types_are_judged_as_the_original_assert_judges_them():
    """Round 2: a correct fix may return numpy.float64, a Fraction, a namedtuple, an IntEnum, ...: each is
    written as the value the original assert compares (a subclass as its base value, a numpy scalar as its
    .item(), a rational exactly), so `== 2.5` holds for Fraction(5, 2) and fails for Fraction(7, 2)."""
    code = textwrap.dedent('''
        import json, sys, types
        sys.path.insert(0, sys.argv[1])
        sys.modules["tandem_report"] = types.SimpleNamespace(emit=lambda r: print(json.dumps(r)), current_test=lambda: "t")
        import collections, decimal, enum, fractions, numpy, tandem_checks
        Point = collections.namedtuple("Point", "x y")
        class Size(enum.IntEnum):
            BIG = 3
        class Shout(str):
            def __str__(self):
                return "forged"
        for v in [numpy.float64(2.5), numpy.int64(3), numpy.bool_(True), fractions.Fraction(5, 2),
                  decimal.Decimal("2.5"), Point(1, 2), collections.OrderedDict(a=1), collections.Counter("aab"),
                  Size.BIG, Shout("hi"), fractions.Fraction(7, 2)]:
            tandem_checks.check(0, v)
    ''')
    out = subprocess.run([sys.executable, "-c", code, str(GRADER_DIR)], capture_output=True, text=True, check=True)
    values = [decode(json.loads(line)["v"]) for line in out.stdout.splitlines()]
    expected = [2.5, 3, True, 2.5, 2.5, (1, 2), {"a": 1}, {"a": 2, "b": 1}, 3, "hi", 3.5]
    assert all(Site(0, "f", 1, "==", e).passes(v) for v, e in zip(values, expected)), values
    assert not Site(0, "f", 1, "==", 2.5).passes(values[-1])
    with pytest.raises(Malformed):
        decode({"q": [1, 0]})


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("variant", ["numpy_median", "fraction_median"])
def test_a_correct_fix_returning_another_number_type_scores_one(tmp_path, backend, variant):
    """Round 2: tinystats' median fixed with numpy.median (numpy.float64) or with Fraction arithmetic passes the
    original tests, so it scores 1 (it scored 0 when only exact built-in types were plain data)."""
    body = {"numpy_median": "    import numpy\n    return numpy.median(xs)\n",
            "fraction_median": "    from fractions import Fraction\n    return (Fraction(xs[mid - 1]) + xs[mid]) / 2\n"}[variant]
    command = ("python - <<'EOF'\nimport pathlib\np = pathlib.Path('tinystats/describe.py')\n"
               f"p.write_text(p.read_text().replace('    return (xs[mid] + xs[mid + 1]) / 2\\n', {body!r}))\nEOF\n"
               "grep -q 'return (xs\\[mid\\] + xs\\[mid + 1\\]) / 2' tinystats/describe.py && exit 1 || true")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        task = runtime.grader.task(row_named("tinystats"))
        res = runtime.grader.grade(task, _agent_diff(runtime, task, command))
    finally:
        reset_runtime()
    assert res.reward == 1.0 and not res.tamper, res.info()


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_expectation_leaves_the_hosts_judging_code(tmp_path, backend, caplog):
    """Round 2: a 0's reason, check_failures, refusals and logs name what a check computes, never what it
    expects (they used to quote `assert to_base(10, 2) == "1010"`)."""
    import logging

    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    caplog.set_level(logging.DEBUG)
    try:
        task = runtime.grader.task(row_named("romanum"))
        plan = runtime.grader.plan(task)
        res = runtime.grader.grade(task, _agent_diff(runtime, task, "echo '# not a fix' >> README.md"))
    finally:
        reset_runtime()
    assert res.reward == 0.0 and res.check_failures, res.info()
    shown = json.dumps(res.info()) + caplog.text + json.dumps(plan.summary())
    originals = []
    for rel in task.test_files:
        lines = (Path(task.repo_path) / rel).read_text().splitlines()
        # the original file's checks: sites numbered from GENERATED are the grader's own (raising rows, a twin over
        # fresh arguments), appended to the graded copy only, past the original's last line
        originals += [lines[site.line - 1].strip() for k, site in plan.sites.items() if site.file == rel and k < GENERATED]
    assert originals and not [line for line in originals if line in shown], shown[:2000]
    assert not [s for s in plan.sites.values() if f"== {s.expected!r}" in shown]


def test_records_are_judged_in_a_child_that_agrees_and_is_bounded():
    """The host's verdict of a stream, computed in a limited child process: the same as judge() in-process for
    an honest stream; a hash flood runs the child out of CPU, which is tampering, not a stall of the host."""
    from tandem.envs.coding.judging import judge_isolated

    site, test = Site(0, "tests/t.py", 3, "==", 3, "f()"), "tests/t.py::a"
    records = [{"ev": "start"}, {"ev": "check", "id": test, "k": 0, "v": 3},
               {"ev": "report", "id": test, "when": "call", "outcome": "passed"}, {"ev": "finish", "exitstatus": 0}]
    honest = b"".join(json.dumps(r).encode() + b"\n" for r in records)
    args = ([test], honest, 0, "", {0: site}, {test: {0}})
    assert judge_isolated(*args) == judge(args[0], parse_stream(honest, {0: site}), *args[2:])
    # 120,000 integers hashing alike: n**2 / 2 = 7.2e9 probes outrun a 1 s CPU limit on any machine
    flood = {"ev": "check", "id": test, "k": 0, "v": {"s": [i * ((1 << 61) - 1) for i in range(120_000)]}}
    started = time.thread_time()
    verdict = judge_isolated([test], honest + json.dumps(flood).encode() + b"\n", 0, "", {0: site}, {test: {0}}, cpu_s=1)
    assert time.thread_time() - started < 5 and verdict.tests == {test: "FAILED"}
    assert any("ran out of its limits" in t for t in verdict.tamper), verdict
