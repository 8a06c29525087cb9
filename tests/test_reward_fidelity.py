"""Issue 46: a correct fix is never refused. The host judges as the original assert judges.

- values: for standard types that are no subclass of a plain one (UserList, UserDict, UserString, a
  mapping proxy, dict views, Mapping and Set ABCs, the numeric tower), the host's verdict on the
  value the sandbox writes equals the original `==` on the value itself, both ways;
- bytes: the agent's diff travels as bytes (a fix in a latin-1 source file applies as written);
- a writable graded copy: code that writes a cache beside its module runs as under pytest, while
  the graded test files stay tandem's (no write, unlink or rename of them or their directories);
- order-free reference checks: a callback check reached 4 times where the reference reached it 3
  times is compared as the original compares it.
Each correct alternative fix below is one the reference did not write; it scores 1 on every backend.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap

import pytest

from tandem.envs.coding.checks import Site, decode
from tandem.envs.coding.grading import GRADER_DIR, get_runtime, reset_runtime
from tests._derivers import agent_diff_bytes
from tests._swe import make_cfg, row_named, sandbox_backends

_, BACKENDS = sandbox_backends()

# (value built in the sandbox, constant the original assert compares it with); True and False verdicts both
AGREEMENT = [
    ("collections.UserList([1, 2])", "[1, 2]"), ("collections.UserList([1, 2])", "(1, 2)"),
    ("collections.UserList([1, 2])", "[2, 1]"), ("collections.UserString('ab')", "'ab'"),
    ("collections.UserString('ab')", "'b'"), ("collections.UserDict(a=1)", "{'a': 1}"),
    ("collections.UserDict(a=1)", "{'a': 2}"), ("types.MappingProxyType({'a': [1]})", "{'a': [1]}"),
    ("types.MappingProxyType({'a': 1})", "{'b': 1}"), ("{1: 2, 3: 4}.keys()", "{1, 3}"),
    ("{1: 2, 3: 4}.keys()", "[1, 3]"), ("{1: 2}.items()", "{(1, 2)}"), ("{1: 2}.values()", "[2]"),
    ("{1: [2]}.items()", "{(1, 2)}"), ("Frozen({'x': 1})", "{'x': 1}"), ("Frozen({'x': 1})", "{'x': 2}"),
    ("Bag([1, 2])", "{1, 2}"), ("Bag([1, 2])", "frozenset({2})"), ("Seq([1, 2])", "[1, 2]"),
    ("Whole(3)", "3"), ("Whole(3)", "3.0"), ("Whole(3)", "4"), ("Ratio(5, 2)", "2.5"), ("Ratio(5, 2)", "2"),
    ("Real(2.5)", "2.5"), ("Real(2.5)", "3"), ("collections.deque([1])", "[1]"),
]
TYPES = '''
import collections, collections.abc as abc, fractions, numbers, types

class Frozen(abc.Mapping):
    def __init__(self, d): self._d = dict(d)
    def __getitem__(self, k): return self._d[k]
    def __iter__(self): return iter(self._d)
    def __len__(self): return len(self._d)

class Bag(abc.Set):
    def __init__(self, xs): self._xs = set(xs)
    def __contains__(self, x): return x in self._xs
    def __iter__(self): return iter(self._xs)
    def __len__(self): return len(self._xs)

class Seq(abc.Sequence):
    def __init__(self, xs): self._xs = list(xs)
    def __getitem__(self, i): return self._xs[i]
    def __len__(self): return len(self._xs)

class Whole:
    def __init__(self, n): self.n = n
    def __int__(self): return self.n
    __index__ = __int__
    def __eq__(self, other): return self.n == other
    __hash__ = None
numbers.Integral.register(Whole)

class Ratio:
    def __init__(self, a, b): self.numerator, self.denominator = a, b
    def __eq__(self, other): return fractions.Fraction(self.numerator, self.denominator) == other
numbers.Rational.register(Ratio)

class Real:
    def __init__(self, x): self.x = x
    def __float__(self): return self.x
    def __eq__(self, other): return self.x == other
numbers.Real.register(Real)
'''


def test_the_hosts_verdict_on_standard_types_is_the_original_asserts():
    """Each value is written by the real sandbox encoder; the host's `==` on what it decodes must say what
    the original `value == expected` said, for equal and for unequal values alike (issue 46: a fix returning
    a UserList or a mapping proxy was opaque, never equal, and scored 0)."""
    code = textwrap.dedent('''
        import json, sys, types
        sys.path.insert(0, sys.argv[1])
        sys.modules["tandem_report"] = types.SimpleNamespace(emit=lambda r: print(json.dumps(r)),
                                                             current_test=lambda: "t")
        import tandem_checks
    ''') + TYPES + textwrap.dedent('''
        for value, expected in json.loads(sys.argv[2]):
            v = eval(value)
            try:
                original = bool(v == eval(expected))
            except TypeError:  # an unhashable item: the assert errors, the test fails
                original = False
            print(json.dumps({"original": original}))
            tandem_checks.check(0, v)
    ''')
    out = subprocess.run([sys.executable, "-c", code, str(GRADER_DIR), json.dumps(AGREEMENT)], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    verdicts = []
    for (value, expected), original, record in zip(AGREEMENT, out[0::2], out[1::2]):
        host = Site(0, "t.py", 1, "==", eval(expected)).passes(decode(json.loads(record)["v"]))
        verdicts.append((value, expected, json.loads(original)["original"], host))
    assert len(verdicts) == len(AGREEMENT)
    disagree = [v for v in verdicts if v[2] != v[3]]
    assert not disagree, disagree
    assert sum(v[2] for v in verdicts) >= 12 and sum(not v[2] for v in verdicts) >= 10  # both ways tested


# ----------------------------------------------------------------------------- correct alternative fixes
def _edit(path: str, old: str, new: str) -> str:
    """Bash that replaces `old` by `new` in `path` (exactly once, or the command fails)."""
    return (f"python - <<'EOF'\nimport pathlib\np = pathlib.Path({path!r})\nt = p.read_text()\n"
            f"assert t.count({old!r}) == 1, t\np.write_text(t.replace({old!r}, {new!r}))\nEOF\n")


ALTERNATIVE_FIXES = {  # name: (task, bash on top of the reference fix, or a whole fix of its own)
    # merge() returns a UserList of its intervals: `== [(1, 10)]` holds under pytest
    "userlist": ("spans", _edit("spans/merge.py", "    return out\n", "    import collections\n"
                                "    return collections.UserList(out)\n")),
    # parse() returns a read-only view of its dict: `== {"a": [...]}` holds under pytest
    "mapping_proxy": ("qstring", _edit("qstring/query.py", "    return result\n\n\ndef build",
                                       "    import types\n    return types.MappingProxyType(result)\n\n\ndef build")),
    # the module writes a cache file beside itself when imported (the graded copy was read-only: ImportError)
    "cache_beside_module": ("romanum", "cat >> romanum/core.py <<'EOF'\n\nimport os as _os\n\n"
                                       "with open(_os.path.join(_os.path.dirname(__file__), '_digits.cache'), 'w') "
                                       "as _cache:\n    _cache.write(repr(sorted(_DIGITS.items())))\nEOF\n"),
    # a fix that breaks itself if it can write a graded test file, or move it away and back, through a shell
    # (no audit event): it scores 1 only where the writable graded copy keeps the graded tests tandem's
    "graded_tests_stay_tandems": ("romanum", "cat >> romanum/__init__.py <<'EOF'\n\nimport subprocess as _sp\n\n"
                                             "_F = '/testbed/tests/test_romanum_parse.py'\n"
                                             "_TRY = f'echo >> {_F} || (mv {_F} {_F}.x && mv {_F}.x {_F})'\n"
                                             "if _sp.run(['sh', '-c', _TRY], capture_output=True).returncode == 0:\n"
                                             "    raise ImportError('the graded tests were writable')\nEOF\n"),
}


@pytest.mark.parametrize("backend", BACKENDS)
def test_correct_fixes_the_reference_did_not_write_score_one(tmp_path, backend):
    """Issue 46: each fix passes the original hidden tests under plain pytest, and scored 0 before (a UserList
    or mapping proxy was opaque, never equal; the graded copy was read-only). Now each scores 1, and the
    graded test files stay tandem's in the writable copy (a fix that could move them away breaks itself)."""
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        results = {}
        for name, (task_name, command) in ALTERNATIVE_FIXES.items():
            row = row_named(task_name)
            task = runtime.grader.task(row)
            results[name] = runtime.grader.grade(task, agent_diff_bytes(runtime, task, command, row))
    finally:
        reset_runtime()
    wrong = {name: (res.reason, res.check_failures) for name, res in results.items() if res.reward != 1.0}
    assert not wrong, wrong
    assert all(not res.tamper and res.host_checks for res in results.values())


def _local_task(tmp_path, files: dict[str, bytes], bug: str, f2p: list[str], p2p: list[str], statement: str):
    from tandem.envs.coding.swe_data import task_from_row

    repo = tmp_path / "repo"
    for rel, data in files.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_bytes(data)
    return task_from_row({"instance_id": f"local__{repo.name}.0.bug", "repo": "local/repo", "patch": bug,
                          "repo_path": str(repo), "FAIL_TO_PASS": f2p, "PASS_TO_PASS": p2p,
                          "problem_statement": statement})


LATIN1_SOURCE = "# -*- coding: latin-1 -*-\nGREETING = 'café'\n\ndef sub(a, b):\n    return a - b\n".encode("latin-1")
LATIN1_TESTS = (b"from pkg import GREETING, sub\n\n\ndef test_sub():\n    assert sub(17, 5) == 12\n\n\n"
                b"def test_greeting():\n    assert len(GREETING) == 4\n")
LATIN1_BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
              "@@ -2,4 +2,4 @@\n GREETING = 'caf\udce9'\n \n def sub(a, b):\n-    return a - b\n+    return a + b\n")
"""The bug patch as text holding the bytes (the latin-1 'é' as a surrogate escape, as diff_text writes it)."""


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_fix_in_a_latin1_source_file_is_graded_as_the_agent_wrote_it(tmp_path, backend):
    """Issue 46: the diff was decoded with replacement characters, so a hunk next to a latin-1 byte no longer
    applied and a correct fix scored 0. The diff now travels as bytes: it scores 1, and the byte in the graded
    copy is the agent's. The text a person reads (diff()) is what no longer applies."""
    task = _local_task(tmp_path, {"pkg/__init__.py": LATIN1_SOURCE, "tests/test_pkg.py": LATIN1_TESTS},
                       LATIN1_BUG, ["tests/test_pkg.py::test_sub"], ["tests/test_pkg.py::test_greeting"],
                       "sub() adds its arguments")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
        with runtime.agent_pool.acquire(template) as sb:
            assert sb.exec("sed -i 's/return a + b/return a - b  # caf\\xe9/' pkg/__init__.py").returncode == 0
            raw, text = sb.diff_bytes(), sb.diff()
        fixed, replaced = runtime.grader.grade(task, raw), runtime.grader.grade(task, text)
    finally:
        reset_runtime()
    assert b"caf\xe9" in raw and "\ufffd" in text
    assert fixed.reward == 1.0 and not fixed.tamper, fixed.info()
    assert replaced.reward == 0.0 and "does not apply" in replaced.reason, replaced.reason


def test_a_binary_file_without_its_contents_is_refused_by_name():
    from tandem.envs.coding.graded_diff import DiffRefused, check_sizes, diff_text

    diff = (b"diff --git a/logo.png b/logo.png\nindex 1..2 100644\nBinary files a/logo.png and b/logo.png differ\n"
            b"diff --git a/x.py b/x.py\n--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-a = '\xe9'\n+a = '\xe8'\n")
    text = diff_text(diff)
    assert text.encode("utf-8", "surrogateescape") == diff  # every byte kept
    with pytest.raises(DiffRefused, match="binary file logo.png"):
        check_sizes(text, 1 << 20, 1 << 20)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_writable_graded_copy_keeps_the_graded_tests_tandems(tmp_path, backend):
    """The graded copy is writable (a cache beside a module works) but the graded test files and conftest.py
    cannot be written, removed or renamed, nor any directory above them, by the run (the agent's code)."""
    import os

    from tandem.envs.coding.sandbox import Isolation, Limits, SandboxPool, TemplateCache

    if os.geteuid() != 0:
        pytest.skip("without root the graded copy stays a read-only mount (no uid to own it)")

    def tree(d):
        for rel in ("pkg/__init__.py", "pkg/tests/test_a.py", "pkg/tests/conftest.py", "pkg/tests/helper.py"):
            (d / rel).parent.mkdir(parents=True, exist_ok=True)
            (d / rel).write_text(f"# {rel}\n")

    templates = TemplateCache(tmp_path / "templates")
    template = templates.get("t", tree)
    limits = Limits(cpu_time_s=20, memory_mb=256, max_processes=32, max_file_mb=64, max_open_files=128)
    pool = SandboxPool(tmp_path / "pools", 1, Isolation.create(backend, limits), templates, base_uid=61870)
    attacks = ["echo x > pkg/tests/test_a.py", "rm -f pkg/tests/test_a.py", "mv pkg/tests/test_a.py pkg/t.py",
               "mv pkg/tests pkg/old", "mv pkg old", "rm -f pkg/tests/conftest.py", "chmod 666 pkg/tests/test_a.py"]
    allowed = ["echo c > pkg/cache.txt", "echo c > pkg/tests/cache.txt", "echo h >> pkg/tests/helper.py",
               "rm pkg/tests/cache.txt", "mkdir pkg/sub && echo s > pkg/sub/x"]
    try:
        with pool.acquire(template, graded=True) as sb:
            assert sb.open_graded(["pkg/tests/test_a.py", "pkg/tests/conftest.py"])
            out = sb.exec("; ".join(f"({a}) 2>/dev/null && echo 'did: {a}'" for a in attacks + allowed)).output
            kept = [(sb.testbed / rel).read_text() for rel in ("pkg/tests/test_a.py", "pkg/tests/conftest.py")]
    finally:
        pool.close()
    assert [line[5:] for line in out.splitlines() if line.startswith("did: ")] == allowed, out
    assert kept == ["# pkg/tests/test_a.py\n", "# pkg/tests/conftest.py\n"]


CLAMP_SOURCE = b'''def clamp(x, lo, hi):
    return max(lo, min(x, hi))


def clamp_all(xs, lo, hi, report):
    """Clamp each x into [lo, hi]; report(x, clamped) for each."""
    out = []
    for x in xs:
        c = clamp(x, lo, hi)
        report(x, c)
        out.append(c)
    return out
'''
CLAMP_TESTS = b'''from pkg import clamp, clamp_all


def test_reports_clamped():
    def report(x, c):
        assert c == min(max(x, 0), 10)
    assert clamp_all([-5, 5, 50], 0, 10, report) == [0, 5, 10]


def test_inside():
    assert clamp(5, 0, 10) == 5
'''
CLAMP_BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
             "@@ -1,3 +1,3 @@\n def clamp(x, lo, hi):\n-    return max(lo, min(x, hi))\n"
             "+    return max(lo, min(x, hi - 1))\n \n")
# reports the first value once more before the others: the callback's check runs 4 times, the reference's 3
CLAMP_ANNOUNCING_FIX = '''cat > pkg/__init__.py <<'EOF'
def clamp(x, lo, hi):
    return lo if x < lo else hi if x > hi else x


def clamp_all(xs, lo, hi, report):
    """Clamp each x into [lo, hi]; report(x, clamped) for each (the first one announced first)."""
    out = [clamp(x, lo, hi) for x in xs]
    if out:
        report(xs[0], out[0])
    for x, c in zip(xs, out):
        report(x, c)
    return out
EOF
'''


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_check_reached_more_often_than_the_reference_is_judged_as_the_original(tmp_path, backend):
    """Issue 46: a callback's `assert c == min(max(x, 0), 10)` runs 4 times under a correct fix and 3 under the
    reference; its reference values were compared by position, so the fix scored 0. Each value now meets one of
    R's values and each of R's values is met (order-free), as the original compares each run: it scores 1,
    while the bug (one value never met) and a fix that skips a report (a value never met) still score 0."""
    task = _local_task(tmp_path, {"pkg/__init__.py": CLAMP_SOURCE, "tests/test_pkg.py": CLAMP_TESTS}, CLAMP_BUG,
                       ["tests/test_pkg.py::test_reports_clamped"], ["tests/test_pkg.py::test_inside"],
                       "clamp_all stops short of the upper bound")
    skipping = CLAMP_ANNOUNCING_FIX.replace("    for x, c in zip(xs, out):\n        report(x, c)\n",
                                            "    for x, c in zip(xs[:-1], out):\n        report(x, c)\n")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        graded = {name: runtime.grader.grade(task, agent_diff_bytes(runtime, task, command, None))
                  for name, command in (("announcing", CLAMP_ANNOUNCING_FIX), ("skipping", skipping),
                                        ("bug", "echo '# not a fix' >> pkg/__init__.py"))}
    finally:
        reset_runtime()
    assert not plan.refused, plan.refused
    assert graded["announcing"].reward == 1.0, graded["announcing"].info()
    assert graded["skipping"].reward == 0.0 and "never ran" in graded["skipping"].reason, graded["skipping"].reason
    assert graded["bug"].reward == 0.0, graded["bug"].info()


# ----------------------------------------------------------------------------- parametrized expectations
SUB_SOURCE = b"def sub(a, b):\n    return a - b\n"
SUB_TESTS = b'''import pytest

from pkg import sub


@pytest.mark.parametrize("a, b, want", [(7, 3, 4),
                                        (20, 5, 15)])
def test_sub(a, b, want):
    assert sub(a, b) == want


class TestNames:
    @pytest.mark.parametrize("word, want", [("ab", "ab-ab"), ("x", "x-x")])
    def test_twice(self, word, want):
        assert "-".join([word, word]) == want


@pytest.mark.parametrize("n", [5, 6])
def test_zero(n):
    assert sub(n, n) == 0
'''
SUB_BUG = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n+++ b/pkg/__init__.py\n"
           "@@ -1,2 +1,2 @@\n def sub(a, b):\n-    return a - b\n+    return a + b\n")
SUB_F2P = ["tests/test_pkg.py::test_sub[7-3-4]", "tests/test_pkg.py::test_sub[20-5-15]"]
SUB_P2P = ["tests/test_pkg.py::TestNames::test_twice[ab-ab-ab]", "tests/test_pkg.py::TestNames::test_twice[x-x-x]",
           "tests/test_pkg.py::test_zero[5]", "tests/test_pkg.py::test_zero[6]"]
# test_zero's inputs are 5 and 6, not 1 and 2: under the bug sub(2, 2) returns 4, test_sub[7-3-4]'s expected
# value; written nowhere, it is a 1-in-3 guess among sub()'s values under the bug (tandem/envs/coding/
# derivation.py), too short odds alone for GUESS_BOUND, so that test (only: test_sub[20-5-15] stays decisive)
# would refuse the task.


def test_a_parametrized_expectation_leaves_the_graded_copy():
    """The expected column is taken out of the graded copy (each value None), its cases renamed so their ids
    name no expectation either; every line stays where it was; the host keeps each case's value."""
    from tandem.envs.coding.params import hide

    source = SUB_TESTS.decode()
    hidden = hide(source, "tests/test_pkg.py", tuple(SUB_F2P + SUB_P2P))
    assert hidden.source.count("\n") == source.count("\n")
    assert "15" not in hidden.source and "4)" not in hidden.source and "ab-ab" not in hidden.source
    assert "(7, 3, None)" in hidden.source and "ids=['case0', 'case1']" in hidden.source
    assert "[5, 6])" in hidden.source  # no expectation column there: left as written
    assert hidden.aliases == {"tests/test_pkg.py::test_sub[7-3-4]": "tests/test_pkg.py::test_sub[case0]",
                              "tests/test_pkg.py::test_sub[20-5-15]": "tests/test_pkg.py::test_sub[case1]",
                              "tests/test_pkg.py::TestNames::test_twice[ab-ab-ab]":
                                  "tests/test_pkg.py::TestNames::test_twice[case0]",
                              "tests/test_pkg.py::TestNames::test_twice[x-x-x]":
                                  "tests/test_pkg.py::TestNames::test_twice[case1]"}
    assert sorted((sorted(v.values()) for v in hidden.expected.values()), key=str) == [["ab-ab", "x-x"], [4, 15]]
    # pytest names a case otherwise than computed here: the file is left as written, never misgraded
    assert hide(source, "tests/test_pkg.py", ("tests/test_pkg.py::test_sub[7-3-four]",)).aliases.keys() == {
        "tests/test_pkg.py::TestNames::test_twice[ab-ab-ab]", "tests/test_pkg.py::TestNames::test_twice[x-x-x]"}
    used = source.replace("        assert \"-\".join([word, word]) == want", "        assert len(want) > 0")
    assert "TestNames" not in "".join(hide(used, "tests/test_pkg.py", ()).aliases)  # `want` used otherwise


@pytest.mark.parametrize("backend", BACKENDS)
def test_parametrized_expectations_are_graded_not_refused(tmp_path, backend):
    """Issue 46: a hidden test whose expectation is a parametrize argument was refused as guessable (the
    sandbox held it). With the column held on the host: the fix scores 1, the bug and the generic forger 0."""
    from tests._forger import forger_command

    task = _local_task(tmp_path, {"pkg/__init__.py": SUB_SOURCE, "tests/test_pkg.py": SUB_TESTS}, SUB_BUG,
                       SUB_F2P, SUB_P2P, "sub() adds instead of subtracting")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        fixed = runtime.grader.grade(task, agent_diff_bytes(runtime, task, "sed -i 's/a + b/b - (b - a) - b/' "
                                                                     "pkg/__init__.py", None))
        bug = runtime.grader.grade(task, agent_diff_bytes(runtime, task, "echo '# no fix' >> pkg/__init__.py", None))
        forged = [runtime.grader.grade(task, agent_diff_bytes(runtime, task, forger_command(i, task.problem_statement),
                                                         None)).reward for i in range(4)]
    finally:
        reset_runtime()
    assert not plan.refused and all(plan.host_graded[plan.graded_id(t)] for t in SUB_F2P), plan.refused
    table = next(n for n in ast.parse(plan.files["tests/test_pkg.py"]).body if getattr(n, "name", "") == "test_sub")
    rows = ast.literal_eval(table.decorator_list[0].args[1])  # the graded copy keeps its fresh rows (regression rows)
    assert not any(15 in row for row in rows[:2]), rows[:2]  # the original rows' expected values are held on the host
    assert fixed.reward == 1.0 and set(fixed.tests) == set(SUB_F2P + SUB_P2P), fixed.info()
    assert bug.reward == 0.0 and bug.tests[SUB_F2P[1]] == "FAILED", bug.info()
    assert forged == [0.0] * 4
