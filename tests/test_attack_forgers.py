"""Issue 46's hostile review on the realistic task set: forgers that a grader grading every check would pay
must score 0 on the real grader, however it decides to grade (refusing the task, or holding a check they miss).

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
CASES = {  # task (the bug's id) -> a forger that answers every one of its checks as the fix does
    "remove_assign_gcd": "abs@named",        # gcd(-4, 6) is -2 under the bug: its magnitude is the answer
    "ctrl_invert_if_sign": "default:0@stated",  # sign(0): the issue writes the 0 the check expects
    "remove_assign_digit_sum": "absargs@named",  # digit_sum(-1234) re-run by the bug's code on 1234: right on any row,
                                                 # a fresh one of a differential check too (t46-diff 5c5aa41 paid it 1)
    "op_flip_hamming": "complement@named",  # len(a) - the bug's count of equal positions: right on any row, fresh
                                            # ones included (t46-diff 601afd2 paid it 1)
}


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
def test_a_forger_that_answers_every_check_scores_zero(tmp_path, backend):
    """Each case's forger answers its task whole where nothing guards it (above): the real grader pays it 0,
    whether it refuses the task or grades it, and a graded task's reference fix scores 1."""
    from bench.forge_rate import agent_diff

    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        out = {}
        for bug, spec in CASES.items():
            task = _task(bug)
            plan = runtime.grader.plan(task)
            forged = runtime.grader.grade(task, agent_diff_bytes(runtime, task, attack_command(spec, task.problem_statement)))
            fixed = None if plan.refused else runtime.grader.grade(task, agent_diff(runtime, task, None, reverse_patch=True))
            out[bug] = (plan.refused, forged, fixed)
    finally:
        reset_runtime()
    for bug, (refused, forged, fixed) in out.items():
        assert forged.reward == 0.0, (bug, CASES[bug], forged.reason)
        assert refused or fixed.reward == 1.0, (bug, fixed.reason)
