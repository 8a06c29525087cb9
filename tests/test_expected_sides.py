"""Issue 46: a check whose expected side calls code the fix changes, right both ways.

    assert parse(bump("1.4.2", "patch")) == parse("1.4.3")

The host held R at the reference fix's value, so a correct fix that changes what parse() returns (a tuple
where the reference's gave a dict) passed plain pytest and scored 0. Now a check whose R runs the
repository's code and that the bug already passes is *own* (tandem.envs.coding.expected_sides): the graded
copies compute R too and the run's own `E == R` passes it. A decisive check never is: a forger that makes
both of its sides return one constant passes plain pytest and scores 0, its reason naming the held side.
"""

from __future__ import annotations

import difflib
import json
import os
import subprocess
import sys
import textwrap

import pytest

from tandem.envs.coding.checks import Site, parse
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.instrument import CodeReference
from tandem.envs.coding.verdict import judge, parse_stream
from tests._derivers import agent_diff_bytes
from tests._swe import make_cfg, sandbox_backends
from tests.test_reward_fidelity import _local_task

_, BACKENDS = sandbox_backends()
T = "tests/test_version.py::t"


# ----------------------------------------------------------------------------- the host's verdict
def _judge(records: list[dict], sites: dict[int, Site], required: set[int]):
    lines = [{"ev": "start"}, *({"ev": "check", "id": T, **r} for r in records),
             {"ev": "report", "id": T, "when": "call", "outcome": "passed"}, {"ev": "finish", "exitstatus": 0}]
    stream = b"".join(json.dumps(r).encode() + b"\n" for r in lines)
    return judge([T], parse_stream(stream, sites), 0, "", sites, {T: required})


def test_an_own_sites_expected_side_is_the_runs_and_a_decisive_ones_is_the_hosts():
    """Site 0 is decisive (the bug fails it): judged on the reference's R alone, and a record that writes its R
    is tampering. Site 1 is own (the bug passes it): a value passes when it meets the reference's R or when
    the run's own `E == R` held; it must still be reached, and its R goes with its outcome."""
    held = CodeReference({T: ("1.5.0",)})
    own = CodeReference({T: ({"major": 1, "minor": 4, "patch": 3},)}, own=True)
    sites = {0: Site(0, "tests/test_version.py", 5, "==", held, 'bump("1.4.2", "minor")'),
             1: Site(1, "tests/test_version.py", 9, "==", own, 'parse(bump("1.4.2", "patch"))')}
    right = {"k": 0, "v": "1.5.0"}
    tuple_fix = {"k": 1, "v": {"t": [1, 4, 3]}, "r": {"t": [1, 4, 3]}, "eq": True}
    assert _judge([right, tuple_fix], sites, {0, 1}).tests == {T: "PASSED"}
    assert _judge([right, {"k": 1, "v": {"d": [["major", 1], ["minor", 4], ["patch", 3]]}}], sites, {0, 1}).tests[T] \
        == "PASSED"  # no R written: the reference's value still passes it
    both_sides = _judge([{"k": 0, "v": "forged"}, tuple_fix], sites, {0, 1})
    assert both_sides.tests[T] == "FAILED" and "expected side is computed by the repository's code" in \
        both_sides.check_failures[T], both_sides
    written = _judge([{"k": 0, "v": "forged", "r": "forged", "eq": True}, tuple_fix], sites, {0, 1})
    assert any("an expectation written by a graded run" in t for t in written.tamper), written
    disagree = _judge([right, {**tuple_fix, "eq": False}], sites, {0, 1})
    assert disagree.tests[T] == "FAILED" and "expected side" not in disagree.check_failures[T]  # a plain miss
    assert _judge([right], sites, {0, 1}).tests[T] == "FAILED"  # never reached
    unpaired = _judge([right, {"k": 1, "v": {"t": [1, 4, 3]}, "r": {"t": [1, 4, 3]}}], sites, {0, 1})
    assert any("without its outcome" in t for t in unpaired.tamper), unpaired


def _exposure(own: bool) -> list[bool]:
    """Which of three decisive checks a forger reaches, next to a check `g(1) == f(2, "9.9.9")` that the bug
    passes (site 0), own or not."""
    from tandem.envs.coding.exposure import analyse
    from tandem.envs.coding.instrument import computes_of

    text = textwrap.dedent('''
        def test_a():
            __tandem_check__(0, (g(1)), (f(2, "9.9.9")))
            __tandem_check__(1, (f(1)))
            __tandem_check__(2, (h(g(1))))
            __tandem_check__(3, (version()))
    ''')
    t = "tests/test_x.py::test_a"
    expected = {0: CodeReference({t: (10,)}, own=own), 1: 10, 2: [4, 4], 3: "9.9.9"}
    sources = {0: "g(1)", 1: "f(1)", 2: "h(g(1))", 3: "version()"}
    sites = {k: Site(k, "tests/test_x.py", 3 + k, "==", v, sources[k], None,
                     computes_of(parse(sources[k], mode="eval").body)) for k, v in expected.items()}
    buggy = {t: [(0, 10), (1, 7), (2, [3, 4]), (3, "9.9.8")]}
    exposure = analyse({"tests/test_x.py": text}, sites, buggy, {t: {0, 1, 2, 3}}, [t], "",
                       {t: {0: (10, True)}} if own else {})
    return [not exposure.strong(sites[k], t, 0) for k in (1, 2, 3)]


def test_an_own_sites_expected_side_counts_as_what_the_sandbox_holds():
    """Own, R runs in the graded copies: what R's call of f() computes under the bug joins f's codomain (site 1
    expects it), `E == R` is a kept equality (site 2 computes E inside), R's constants are echoes (site 3
    expects one). Held on the host (not own), none of the three is within a forger's reach."""
    assert _exposure(own=False) == [False, False, False]
    assert _exposure(own=True) == [True, True, True]


def test_a_uniform_transformation_need_not_pass_own_sites():
    """Every value g() computes plus one passes the decisive check g(5); it fails `g(1) == f(2)` on the reference's
    R, but a forger passes that one with its own R when it is own: then the transformation reaches g(5)."""
    from tandem.envs.coding.exposure import analyse

    t = "tests/test_x.py::test_a"
    text = "def test_a():\n    __tandem_check__(0, (g(1)), (f(2)))\n    __tandem_check__(1, (g(5)))\n"
    reasons = {}
    for own in (False, True):
        sites = {0: Site(0, "tests/test_x.py", 2, "==", CodeReference({t: (10,)}, own=own), "g(1)",
                         computes="g"),
                 1: Site(1, "tests/test_x.py", 3, "==", 6, "g(5)", computes="g")}
        reasons[own] = analyse({"tests/test_x.py": text}, sites, {t: [(0, 10), (1, 5)]}, {t: {0, 1}}, [t], "",
                               {t: {0: (10, True)}} if own else {}).reasons
    assert 1 not in reasons[False] and "(plus one)" in reasons[True].get(1, ""), reasons


def _choose_own(tmp_path, bug_again: int):
    """grading_plan._own_sides on `assert g(1) == f(2)` that the bug passes (its E 3, as R's reference value), the
    bug's second run (R in its copy) writing `bug_again` for E: (the plan, what it returned, that run's copy)."""
    from tandem.envs.coding.grading_plan import GradingPlan, _own_sides
    from tandem.envs.coding.instrument import find_sites, rewrite
    from tandem.envs.coding.sandbox.runner import ExecResult
    from tandem.envs.coding.verdict import Stream

    source, t = "def test_a():\n    assert g(1) == f(2)\n", "tests/test_x.py::test_a"
    candidates = {"tests/test_x.py": find_sites(source, "tests/test_x.py", 0)}
    site = candidates["tests/test_x.py"][0].sites[0]
    assert type(site.expected) is CodeReference  # R calls f(): the repository's code
    sites = {0: Site(0, site.file, site.line, "==", CodeReference({t: (3,)}), site.source)}
    plan = GradingPlan({"tests/test_x.py": rewrite(source, candidates["tests/test_x.py"])}, sites, {t: {0}})
    copies = []

    def run_tests(clean, files, run_sites, references=False):
        copies.append(files["tests/test_x.py"])
        return ExecResult("", 0, False, 0.1, 0), Stream(started=True, checks={t: [(0, bug_again)]})

    buggy = Stream(started=True, checks={t: [(0, 3)]})
    returned = _own_sides(plan, {"tests/test_x.py": source}, candidates, set(), buggy, run_tests, (t,))
    return plan, returned, copies


def test_a_check_the_bug_passes_is_made_own_unless_its_r_changes_what_the_bug_computes(tmp_path):
    """The bug passes `g(1) == f(2)`, whose R calls code: own, its R written into the graded copy, the bug run again
    with it. If that run fails the check (R's side effects), nothing is own and the copy stays as it was."""
    plan, returned, copies = _choose_own(tmp_path, 3)
    assert plan.sites[0].expected.own and "(f(2))" in plan.files["tests/test_x.py"] == copies[0]
    assert returned.checks == {"tests/test_x.py::test_a": [(0, 3)]}
    plan, returned, copies = _choose_own(tmp_path, 4)
    assert not plan.sites[0].expected.own and "f(2)" not in plan.files["tests/test_x.py"] and "(f(2))" in copies[0]
    assert returned.checks == {"tests/test_x.py::test_a": [(0, 3)]}


# ----------------------------------------------------------------------------- the real grader
VERSION = b'''def parse(text):
    """A version string ("v1.4.2 " too) as its numbered parts."""
    major, minor, patch = (int(p) for p in text.strip().lstrip("v").split("."))
    return {"major": major, "minor": minor, "patch": patch}


def render(version):
    return f"{version['major']}.{version['minor']}.{version['patch']}"


def canonical(text):
    """The version written plainly: no leading v, no spaces."""
    return render(parse(text))


def bump(text, part):
    v = parse(text)
    if part == "major":
        v = {"major": v["major"] + 1, "minor": 0, "patch": 0}
    elif part == "minor":
        v = {**v, "minor": v["minor"] + 1, "patch": 0}
    else:
        v = {**v, "patch": v["patch"] + 1}
    return render(v)
'''
VERSION_TESTS = b'''from pkg import bump, canonical, parse


def test_bump_minor():
    assert bump("1.4.2", "minor") == canonical(" v1.5.0")


def test_bump_patch():
    assert parse(bump("1.4.2", "patch")) == parse("1.4.3")


def test_bump_major():
    assert bump("1.4.2", "major") == "2.0.0"


def test_canonical():
    assert canonical("v2.0.1 ") == canonical("2.0.1")
'''
BUGGY = VERSION.decode().replace('"minor": v["minor"] + 1, "patch": 0}', '"minor": v["minor"] + 1}')
VERSION_BUG = "diff --git a/pkg/__init__.py b/pkg/__init__.py\n" + "".join(difflib.unified_diff(
    VERSION.decode().splitlines(True), BUGGY.splitlines(True), "a/pkg/__init__.py", "b/pkg/__init__.py"))
F2P = ["tests/test_version.py::test_bump_minor"]
P2P = ["tests/test_version.py::test_bump_patch", "tests/test_version.py::test_bump_major",
       "tests/test_version.py::test_canonical"]
TUPLE_FIX = '''def parse(text):
    """A version string ("v1.4.2 " too) as (major, minor, patch): tuples compare in order."""
    return tuple(int(p) for p in text.strip().lstrip("v").split("."))


def render(version):
    return ".".join(str(n) for n in version)


def canonical(text):
    return render(parse(text))


def bump(text, part):
    major, minor, patch = parse(text)
    parts = {"major": (major + 1, 0, 0), "minor": (major, minor + 1, 0), "patch": (major, minor, patch + 1)}
    return render(parts[part])
'''
"""A correct fix the reference did not write: versions as tuples, so parse() on the expected side changes too."""
BOTH_SIDES = '''
_bump = bump


def bump(text, part):
    return "forged" if part == "minor" else _bump(text, part)


def canonical(text):
    return "forged"
'''
"""A forger: both sides of the decisive check (and of test_canonical) return one constant; plain pytest passes."""
SELF_EXPECTING = '''
try:
    import tandem_checks as _tc
    _check = _tc.check
    _tc.check = lambda k, value, *expected: _check(k, value, value)  # every check its own expectation
except ImportError:
    pass
'''
COMMANDS = {"reference": None, "tuple_fix": f"cat > pkg/__init__.py <<'EOF'\n{TUPLE_FIX}EOF\n",
            "both_sides": f"cat >> pkg/__init__.py <<'EOF'\n{BOTH_SIDES}EOF\n",
            "self_expecting": f"cat >> pkg/__init__.py <<'EOF'\n{SELF_EXPECTING}EOF\n",
            "bug": "echo '# not a fix' >> pkg/__init__.py"}


def _plain_pytest(tmp_path, name: str, source: str) -> int:
    """The original tests under plain pytest against `source` as pkg/__init__.py: the exit status."""
    repo = tmp_path / "plain" / name
    (repo / "pkg").mkdir(parents=True)
    (repo / "tests").mkdir()
    (repo / "pkg" / "__init__.py").write_text(source)
    (repo / "tests" / "test_version.py").write_bytes(VERSION_TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], cwd=repo,
                          env={**os.environ, "PYTHONPATH": str(repo), "PYTHONDONTWRITEBYTECODE": "1"},
                          capture_output=True, timeout=300).returncode


def test_the_fixes_and_forgers_under_plain_pytest(tmp_path):
    """What the sandbox test grades, under plain pytest: the tuple fix passes the original tests, and so does
    the forger that makes both sides of the decisive check one constant (a grader trusting the run's own R
    there would pay it); the bug fails."""
    assert BUGGY != VERSION.decode()
    assert _plain_pytest(tmp_path, "tuple_fix", TUPLE_FIX) == 0
    assert _plain_pytest(tmp_path, "both_sides", VERSION.decode() + BOTH_SIDES) == 0
    assert _plain_pytest(tmp_path, "self_expecting", VERSION.decode() + SELF_EXPECTING) == 0
    assert _plain_pytest(tmp_path, "bug", BUGGY) == 1


@pytest.mark.timeout(1500)  # a plan (four runs) and 9 gradings: 518 s on unshare at load 12 on 2 cores
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fix_that_changes_the_expected_sides_code_scores_one_and_a_forger_of_both_sides_zero(tmp_path, backend):
    """test_bump_patch's and test_canonical's R call parse() and canonical(), and the bug passes them: own, R in
    the graded copies. test_bump_minor's R calls canonical() too, but the bug fails it: held on the host, R
    never in a graded copy. The tuple fix scores 1 (it scored 0: E, a tuple, against the reference's dict), the
    reference fix 1; a forger of both sides of the decisive check 0 (FAILED, the reason naming the held side),
    one that writes every check's R itself 0 (tampering), the generic forger and the bug 0."""
    from tests._forger import forger_command

    statement = "bump() keeps the patch number when it bumps the minor one; it should start again from zero."
    task = _local_task(tmp_path, {"pkg/__init__.py": VERSION, "tests/test_version.py": VERSION_TESTS}, VERSION_BUG,
                       F2P, P2P, statement)
    reset_runtime()
    # the agent's commands get 60 s, not the config's 10: at load 15 one `cat` into a fresh sandbox ran out of 10
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2, "command_timeout_s": 60}))
    try:
        plan = runtime.grader.plan(task)
        graded = {name: runtime.grader.grade(task, _diff(runtime, task, command)) for name, command in COMMANDS.items()}
        forged = [runtime.grader.grade(task, agent_diff_bytes(runtime, task, forger_command(i, statement))).reward
                  for i in range(4)]
    finally:
        reset_runtime()
    own = {s.source for s in plan.sites.values() if isinstance(s.expected, CodeReference) and s.expected.own}
    assert not plan.refused and plan.host_graded[F2P[0]], plan.refused
    assert own == {'parse(bump("1.4.2", "patch"))', 'canonical("v2.0.1 ")'}, own
    copy = plan.files["tests/test_version.py"]
    assert 'parse("1.4.3")' in copy and 'canonical("2.0.1")' in copy and "1.5.0" not in copy, copy
    rewards = {name: res.reward for name, res in graded.items()}
    assert rewards == {"reference": 1.0, "tuple_fix": 1.0, "both_sides": 0.0, "self_expecting": 0.0, "bug": 0.0}, \
        {name: res.reason for name, res in graded.items()}
    both = graded["both_sides"]
    assert both.tests == {F2P[0]: "FAILED", **{t: "PASSED" for t in P2P}} and not both.tamper, both.info()
    assert "expected side is computed by the repository's code" in both.check_failures[F2P[0]], both.check_failures
    assert any("an expectation written by a graded run" in t for t in graded["self_expecting"].tamper)
    assert forged == [0.0] * 4


def _diff(runtime, task, command: str | None) -> bytes:
    """The agent's diff: `command` in its sandbox, or the reference fix (the bug patch reversed) when None."""
    from tandem.envs.coding.swe_data import apply_patch

    if command is not None:
        return agent_diff_bytes(runtime, task, command)
    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        apply_patch(sb.testbed, task.patch, reverse=True)
        return sb.diff_bytes()
