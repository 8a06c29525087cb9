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
  trial) or refused with the reason.
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
from tandem.envs.coding.swe_data import task_from_row
from tandem.envs.coding.verdict import judge, parse_pytest_report, parse_stream
from tests._forger import forger_command
from tests._forms import FORMS, form_row, write_repo
from tests._swe import make_cfg, sandbox_backends

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
    sites = find_sites(TESTS, "tests/test_x.py", 0)
    text = rewrite(TESTS, sites)
    assert sum(len(c.sites) for c in sites) >= 15 and text.count("\n") == TESTS.count("\n") + 1
    for expected in ("== 4", "6 ==", "{1, 2, 3}", "(1, 3)", "approx(2.25)", "[4, 6]", "(2, 6)", "== 20",
                     "not a number", "== 17", ", 6)", "1.5)"):
        assert expected not in text, expected
    original_lines, new_lines = TESTS.splitlines(), text.splitlines()
    for site in (s for c in sites for s in c.sites):  # each check is replaced on its own line
        assert "__tandem_" in new_lines[site.line - 1] and "__tandem_" not in original_lines[site.line - 1]
    parse(text)


@pytest.mark.parametrize("code", ["correct", "wrong"])
def test_host_verdicts_equal_pytests_on_the_original(tmp_path, code):
    """Every form, on correct and on wrong code: the split file judged on the host says what pytest says."""
    (tmp_path / "tests").mkdir()
    (tmp_path / "lib.py").write_text(LIB if code == "correct" else WRONG)
    (tmp_path / "tests" / "test_x.py").write_text(TESTS)
    original = parse_pytest_report(run_pytest(tmp_path, ["tests/test_x.py"], reporter=False)[0])
    candidates = find_sites(TESTS, "tests/test_x.py", 0)
    (tmp_path / "tests" / "test_x.py").write_text(rewrite(TESTS, candidates))
    if code == "wrong":  # required sites come from the correct code's run, as in a grading plan
        (tmp_path / "lib.py").write_text(LIB)
        required_run = parse_stream(run_pytest(tmp_path, ["tests/test_x.py"], reporter=True)[1])
        (tmp_path / "lib.py").write_text(WRONG)
    out, side = run_pytest(tmp_path, ["tests/test_x.py"], reporter=True)
    stream = parse_stream(side)
    required_from = stream if code == "correct" else required_run
    sites = {s.k: s for c in candidates for s in c.sites}
    required = {t: {k for k, _ in events} for t, events in required_from.checks.items()}
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
    assert Site(0, "f", 1, "==", [6, 16]).strong and not Site(0, "f", 1, "!=", [6, 16]).strong
    assert not Site(0, "f", 1, "==", True).strong and not Site(0, "f", 1, "==", 3, echoes=(3,)).strong
    assert Site(0, "f", 1, "in", ("apple", "apply")).strong
    assert not Site(0, "f", 1, "in", ("apple", "apply"), echoes=("apple",)).strong


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
