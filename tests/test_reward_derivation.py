"""Issue 46: values derived without the fix from what the sandbox holds must not pay.

Each derivation forger (tests/_derivers.py) records, for a check, a value it derived from the
graded files instead of what the buggy code computed. A hidden test whose decisive checks a
derivation reaches is either given a check it cannot reach (the bundled task's test, made
stronger) or refused, naming why; either way the forger scores 0.
"""

from __future__ import annotations

import json
import shutil

import pytest

from tandem.envs.coding.checks import echoes_of, guessable, parse
from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.swe_data import task_from_row
from tests._derivers import agent_diff_bytes, deriver_command
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
    assert "a constant the sandbox's copy holds" in plans["old"].refused, plans["old"].refused
    assert not plans["now"].refused, plans["now"].refused
    assert forged["old"].reward == 0.0 and forged["now"].reward == 0.0, json.dumps(
        {k: v.reason for k, v in forged.items()})
    assert forged["now"].tests["tests/test_heapq2_order.py::test_pops_in_priority_order"] == "FAILED"
