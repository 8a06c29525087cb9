"""Issue 46's hostile review on the realistic task set: forgers that a grader grading every check would pay
must score 0 on the real grader, however it decides to grade (refusing the task, or holding a check they miss).
The only families the battery found answering a task whole are fixes written as a transformation of the bug's
value or inputs (equal to the reference on every input): those score what the reference fix scores.

The families live in tests/_attack_forgers.py; bench.attack_rate runs them all over data/swe_realistic (first on
the host, tests/_attack_sim.py, to find the tasks each one answers, then through the real grader).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.swe_data import load_bundled
from tests._attack_forgers import attack_command
from tests._attack_sim import Simulator
from tests._derivers import agent_diff_bytes
from tests._swe import REPO, make_cfg, sandbox_backends

_, BACKENDS = sandbox_backends()
REALISTIC = REPO / "data" / "swe_realistic" / "tasks.jsonl"
CASES = {  # task (the bug's id) -> a "forger" that answers every one of its checks as the fix does, because it IS
    # the fix written as a transformation of the bug's value or inputs (equal to the reference on every input):
    "remove_assign_gcd": "abs@named",        # the bug returns Euclid's a; the reference returns abs(a)
    "remove_assign_digit_sum": "absargs@named",  # the reference is the bug's loop on abs(n), its removed first line
    "op_flip_hamming": "complement@named",  # equal lengths (else both raise): differing = len(a) - equal positions
}
"""The hostile battery's only families that answer a realistic task whole (the host simulation): each is a correct
fix, so it must score what the reference fix scores (1 where the task is graded; 0 only where it is refused)."""
FORGERIES = [  # (task, forger) answering the task's written rows only: must score 0 however the task is graded
    ("op_flip_hamming", "lookup@named"),  # the visible files' rows looked up, the bug's value elsewhere
    ("op_flip_hamming", "fresh@named"),  # the rows looked up, the bug inverted, the bug's value on a fresh row
    # 0 wherever an argument is written in the issue ("sign(0) is -1": 0, -1, and 1 inside "-1"): on the visible
    # rows (5, -3, 0, 0.5, -0.25) it looks like the fix, but sign(1) and sign(-1) are not 0. Once taken for a fix
    # (`<=` and `<` differ only at 0); the confined rule's probe rows (x = 1, -1) grade the task and catch it.
    ("ctrl_invert_if_sign", "default:0@stated"),
]


def _task(bug: str):
    return next(t for t in load_bundled(Path(REALISTIC)) if f"_{bug}__" in t.instance_id)


def test_the_forgers_answer_what_an_unguarded_grader_would_pay(tmp_path):
    """On the host, every check run and compared with the fix's run: the forgers are live (each answers its task
    whole, keeping the rows the bug gets right), and the ones that are not rules of the task do not."""
    sim = Simulator(_task("remove_assign_gcd"), tmp_path)
    try:
        got = sim.answers(["abs@named", "absargs@named", "invert@named", "lookup@named", "default:0@named"],
                          attack_command)
    finally:
        sim.close()
    assert got["abs@named"]["answers"] and got["absargs@named"]["answers"], got
    assert got["invert@named"]["f2p_right"] == 1 and got["invert@named"]["p2p_broken"], got  # -x on every row
    assert not got["lookup@named"]["tests_changed"], got  # the graded copy holds no expected value to look up
    assert not got["default:0@named"]["answers"], got


@pytest.mark.parametrize("bug", sorted(CASES))
def test_each_case_is_answered_whole_where_nothing_guards_it(tmp_path, bug):
    """The premise of the grader test below, per case: on the host, its forger answers every hidden test of its
    task as the fix does and keeps every test the bug passes."""
    sim = Simulator(_task(bug), tmp_path)
    try:
        got = sim.answers([CASES[bug]], attack_command)[CASES[bug]]
    finally:
        sim.close()
    assert got["answers"], got


@pytest.mark.parametrize("backend", BACKENDS)
def test_correct_rewrites_score_as_the_fix_and_row_forgers_score_zero(tmp_path, backend):
    """Each case's rewrite answers its task whole where nothing guards it (above) because it is a fix: the real
    grader pays it what it pays the reference fix (1 graded, 0 refused). A forger that answers only the rows the
    files write (a lookup table) scores 0 on a task graded by fresh rows whose expectations it never sees."""
    from bench.forge_rate import agent_diff

    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        def grade(bug: str, spec: str):
            task = _task(bug)
            return runtime.grader.grade(task, agent_diff_bytes(runtime, task, attack_command(spec, task.problem_statement)))

        out = {}
        for bug, spec in CASES.items():
            task = _task(bug)
            plan = runtime.grader.plan(task)
            fixed = runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
            out[bug] = (plan.refused, grade(bug, spec), fixed)
        forged = {(bug, spec): grade(bug, spec) for bug, spec in FORGERIES}
    finally:
        reset_runtime()
    for bug, (refused, rewrite, fixed) in out.items():
        assert rewrite.reward == fixed.reward == (0.0 if refused else 1.0), (bug, CASES[bug], rewrite.reason, fixed.reason)
    for (bug, spec), result in forged.items():
        assert result.reward == 0.0, (bug, spec, result.reason)
