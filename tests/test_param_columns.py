"""Issue 46: parametrize expectations that are tuples, lists or enum members are held on the host.

They stayed in the graded copy (pytest names such a case argname + index, or `Cls.MEMBER`, which
tandem.envs.coding.params did not compute; an enum member was no plain data), so the check was
sandbox-held and the task refused. Now the column leaves the graded copy; a plain Enum member is
judged as the original `==` judges it (only itself), an IntEnum member as its int (which a plain
int equals). A task of such tables is graded: the reference fix and correct alternative fixes score
1, the generic forger, a forger echoing another row's expectation, and a fix returning a plain Enum
member's value (which the original `==` rejects) score 0.
"""

from __future__ import annotations

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tests._forger import forger_command
from tests._swe import make_cfg, sandbox_backends
from tests.test_reward_fidelity import _local_task

_, BACKENDS = sandbox_backends()


def _edit(path: str, old: str, new: str) -> str:
    """One line of Python that replaces `old` by `new` in `path` (exactly once, or it fails)."""
    return (f"p = pathlib.Path({path!r}); t = p.read_text(); assert t.count({old!r}) == 1, t; "
            f"p.write_text(t.replace({old!r}, {new!r}))")


def _script(*lines: str) -> str:
    """Bash running the edits in one Python process (one sandbox command, one interpreter start)."""
    return "python - <<'EOF'\nimport pathlib\n" + "\n".join(lines) + "\nEOF\n"

SOURCE = '''import enum


class Shape(enum.Enum):
    POINT = "point"
    LINE = "line"
    AREA = "area"


class Level(enum.IntEnum):
    LOW = 10
    MID = 20
    HIGH = 30


def kind(w, h):
    if w == 0 and h == 0:
        return Shape.POINT
    if w == 0 or h == 0:
        return Shape.LINE
    return Shape.AREA


def level(n):
    if n < 10:
        return Level.LOW
    if n < 100:
        return Level.MID
    return Level.HIGH


def span(xs):
    return (min(xs), max(xs))


def pairs(xs):
    return [[a, b] for a, b in zip(xs, xs[1:])]
'''
BUGGY = (SOURCE.replace("    if w == 0 and h == 0:\n        return Shape.POINT\n", "    return Shape.POINT\n")
         .replace("    return Level.HIGH\n", "    return Level.MID\n").replace("return (min(xs), max(xs))", "return (max(xs), min(xs))")
         .replace("zip(xs, xs[1:])", "zip(xs[1:], xs)"))
TESTS = '''import pytest

from pkg import Level, Shape, kind, level, pairs, span


@pytest.mark.parametrize("w, h, want", [(0, 0, Shape.POINT), (0, 4, Shape.LINE), (7, 0, Shape.LINE),
                                        (3, 8, Shape.AREA), (6, 2, Shape.AREA)])
def test_kind(w, h, want):
    assert kind(w, h) == want


@pytest.mark.parametrize("n, want", [(5, Level.LOW), (50, Level.MID), (100, Level.HIGH), (700, Level.HIGH)])
def test_level(n, want):
    assert level(n) == want


@pytest.mark.parametrize("xs, want", [([4, 9, 1], (1, 9)), ([6], (6, 6)), ([8, 2, 5, 7], (2, 8))])
def test_span(xs, want):
    assert span(xs) == want


@pytest.mark.parametrize("xs, want", [([1, 2, 4], [[1, 2], [2, 4]]), ([3, 8], [[3, 8]])])
def test_pairs(xs, want):
    assert pairs(xs) == want
'''
F = "tests/test_pkg.py::"
F2P = [F + "test_kind[0-4-Shape.LINE]", F + "test_kind[7-0-Shape.LINE]", F + "test_kind[3-8-Shape.AREA]",
       F + "test_kind[6-2-Shape.AREA]", F + "test_level[100-30]", F + "test_level[700-30]", F + "test_span[xs0-want0]",
       F + "test_span[xs2-want2]", F + "test_pairs[xs0-want0]", F + "test_pairs[xs1-want1]"]
P2P = [F + "test_kind[0-0-Shape.POINT]", F + "test_level[5-10]", F + "test_level[50-20]", F + "test_span[xs1-want1]"]
FIX = "cat > pkg/__init__.py <<'EOF'\n" + SOURCE + "EOF\n"
ALTERNATIVES = {  # name: (bash on top of the buggy repo, the reward plain pytest's verdict gives)
    # another algorithm for each function, the same values
    "other_algorithm": (
        _edit("pkg/__init__.py", "    return Shape.POINT\n    if w == 0 or h == 0:\n        return Shape.LINE\n"
              "    return Shape.AREA\n", "    return [Shape.AREA, Shape.LINE, Shape.POINT][(w == 0) + (h == 0)]\n")
        + "\n" + _edit("pkg/__init__.py", "    return Level.MID\n\n\n", "    return Level(30)\n\n\n")
        + "\n" + _edit("pkg/__init__.py", "return (max(xs), min(xs))", "s = sorted(xs)\n    return (s[0], s[-1])")
        + "\n" + _edit("pkg/__init__.py", "zip(xs[1:], xs)", "zip(xs[:-1], xs[1:])"), 1.0),
    # level() returns the plain int: `== Level.HIGH` holds under pytest (an IntEnum member equals its int)
    "plain_int_for_intenum": (_edit("pkg/__init__.py", "    return Level.MID\n\n\n", "    return 30\n\n\n"), 1.0),
}


def _fix_commands() -> dict[str, tuple[str, float]]:
    fixed = {"reference": (FIX, 1.0)}
    base = (_edit("pkg/__init__.py", "    return Shape.POINT\n", "    if w == 0 and h == 0:\n        return Shape.POINT\n")
            + "\n" + _edit("pkg/__init__.py", "return (max(xs), min(xs))", "return (min(xs), max(xs))")
            + "\n" + _edit("pkg/__init__.py", "zip(xs[1:], xs)", "zip(xs, xs[1:])"))
    fixed.update({name: (command if name == "other_algorithm" else base + "\n" + command, reward)
                  for name, (command, reward) in ALTERNATIVES.items()})
    # kind() returns the member's value: `"line" == Shape.LINE` is False under pytest, so this fix is wrong
    fixed["value_not_member"] = (base + "\n" + _edit("pkg/__init__.py", "return Shape.LINE", "return 'line'")
                                 + "\n" + _edit("pkg/__init__.py", "    return Level.MID\n\n\n", "    return Level.HIGH\n\n\n"), 0.0)
    # a forger echoing another row's expectation: every kind is LINE, every span (1, 9), every level HIGH
    fixed["echo_other_row"] = ("cat >> pkg/__init__.py <<'EOF'\n\nkind = lambda w, h: Shape.LINE\n"
                               "span = lambda xs: (1, 9)\nlevel = lambda n: Level.HIGH\n"
                               "pairs = lambda xs: [[3, 8]]\nEOF\n", 0.0)
    return {name: (command if command.startswith("cat") else _script(command), reward)
            for name, (command, reward) in fixed.items()}


def _diff_of(runtime, task, command: str) -> bytes:
    """The agent's diff after `command` in its own sandbox (tests._derivers.agent_diff_bytes, telling the exit)."""
    template = runtime.templates.get(f"{task.instance_id}::agent", task.materialize_agent)
    with runtime.agent_pool.acquire(template) as sb:
        run = sb.exec(command)
        assert run.returncode == 0, (run.returncode, run.output)
        return sb.diff_bytes()


def appended(lines: str) -> str:
    """The shell command that appends `lines` (a program) to the local task's pkg/__init__.py."""
    return f"cat >> pkg/__init__.py <<'EOF'\n\n\n{lines}EOF\n"


def rewards_of(runtime, task, programs: dict[str, tuple[str, object]]) -> dict[str, float]:
    """Name -> the reward of each program (its lines, anything) appended to the local task's package."""
    return {name: runtime.grader.grade(task, _diff_of(runtime, task, appended(lines))).reward
            for name, (lines, _) in programs.items()}


def forged_rewards(runtime, task, variants: int = 2) -> list[float]:
    """The reward of the generic forger's first `variants` variants (tests._forger) on `task`."""
    from tests._forger import forger_command
    return [runtime.grader.grade(task, _diff_of(runtime, task, forger_command(i, task.problem_statement))).reward
            for i in range(variants)]


def _task(tmp_path):
    bug = _diff("pkg/__init__.py", SOURCE, BUGGY)
    return _local_task(tmp_path, {"pkg/__init__.py": SOURCE.encode(), "tests/test_pkg.py": TESTS.encode()}, bug,
                       F2P, P2P, "kind() calls every rectangle a point; span() and pairs() come out backwards; "
                                 "level(100) is not HIGH")


def _diff(rel: str, fixed: str, buggy: str) -> str:
    """The bug as a patch on the fixed source (what the task row's `patch` holds)."""
    import difflib

    body = "".join(difflib.unified_diff(fixed.splitlines(True), buggy.splitlines(True), f"a/{rel}", f"b/{rel}"))
    return f"diff --git a/{rel} b/{rel}\n{body}"


def test_tuple_list_and_enum_columns_leave_the_graded_copy(tmp_path):
    """Host only: every expectation column is taken out; a plain Enum member is held as one, an IntEnum member
    as its int; pytest's own ids (argname + index, `Cls.MEMBER`, the int) map to the graded cases."""
    from tandem.envs.coding.enum_value import EnumMember, enum_table
    from tandem.envs.coding.params import hide

    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(SOURCE)
    hidden = hide(TESTS, "tests/test_pkg.py", tuple(F2P + P2P), lambda: enum_table(tmp_path))
    assert set(hidden.aliases) == set(F2P + P2P)
    for held in ("Shape.LINE", "Level.HIGH", "(1, 9)", "[[1, 2], [2, 4]]"):
        assert held not in hidden.source
    values = {v for column in hidden.expected.values() for v in map(repr, column.values())}
    assert {"Shape.LINE", "30", "(1, 9)", "[[1, 2], [2, 4]]"} <= values
    assert EnumMember("Shape", "LINE") != "line" and EnumMember("Shape", "LINE") != EnumMember("Level", "LINE")
    # an enum member as an input: the graded copy calls with the member itself, so the table stays as written
    as_input = TESTS.replace('[(5, Level.LOW), (50, Level.MID)', '[(Level.HIGH, Level.LOW), (50, Level.MID)')
    assert "(Level.HIGH, Level.LOW)" in hide(as_input, "tests/test_pkg.py", (), lambda: enum_table(tmp_path)).source
    # an enum the repository does not define (so its `==` is unknown here): the table stays as written
    assert "Shape.LINE" in hide(TESTS, "tests/test_pkg.py", tuple(F2P + P2P), dict).source


@pytest.mark.parametrize("backend", BACKENDS)
def test_tuple_and_enum_expectations_are_graded_as_the_original(tmp_path, backend):
    task = _task(tmp_path)
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        plan = runtime.grader.plan(task)
        forged = [runtime.grader.grade(task, _diff_of(runtime, task, forger_command(i, task.problem_statement))
                                       ).reward for i in range(4)]
        rewards = {}
        for name, (command, _) in _fix_commands().items():
            rewards[name] = runtime.grader.grade(task, _diff_of(runtime, task, "set -e\n" + command)).reward
    finally:
        reset_runtime()
    assert not plan.refused, plan.refused
    assert all(plan.host_graded[plan.graded_id(t)] for t in F2P), plan.host_graded
    assert "Shape.LINE" not in plan.files["tests/test_pkg.py"] and "(1, 9)" not in plan.files["tests/test_pkg.py"]
    assert rewards == {name: want for name, (_, want) in _fix_commands().items()}
    assert forged == [0.0] * 4
