"""Issue 46's hostile review with plausible WRONG fixes (tests/_wrong_fixes.py): what a sloppy agent writes instead
of the fix -- the issue's example special-cased, one side of a range check, a table up to a bound, a rewrite that
drops a guard. A wrong fix must score 0 under every plan seed of SEEDS, or score 1 and be judged a fix by the
independent equivalence oracle (tests/_equivalence.py: equal to the reference on >= 2,000 own-drawn inputs per
function inside the tested domain). Holes still open are listed in tests/_wrong_fixes.OPEN_HOLES with their reason;
a selected one that stops paying fails the test as stale.

The whole corpus, with plain pytest and the oracle per wrong fix, is run by
`python -m bench.oracle_battery --wrong-fixes --host` (and graded with --seeds 2 --suspects HOST_RESULT).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.swe_data import load_bundled
from tests._derivers import agent_diff_bytes
from tests._equivalence import Oracle, _beyond_wide, band
from tests._fix_corpus import apply_command
from tests._plan_seeds import plan_seed
from tests._swe import REPO, make_cfg, sandbox_backends
from tests._wrong_fixes import CLOSED_HOLES, FAMILIES, OPEN_HOLES, ORACLE_BLIND, WRONG, by_name

_, BACKENDS = sandbox_backends()
REALISTIC_TASKS = REPO / "data" / "swe_realistic" / "tasks.jsonl"
BUNDLED_TASKS = REPO / "data" / "swe_tasks" / "tasks.jsonl"
SEEDS = (0, 1)
SELECTION = (  # the most instructive wrong fixes: each passes the original hidden tests under plain pytest
    "datekit/op_change_const_quarter:issue_only",  # a lookup table with a typo at May: every month is graded
    "datekit/remove_cond_check_month:other_path",  # ValueError in one caller only: quarter(13) still answers
    "datekit/remove_cond_is_leap:small_only",  # leap centuries tabled up to 4000: hard rows past the guard catch it
    "datekit/op_change_const_day_of_year:boundary",  # a leap day counted in February: a kept row the bug got right
    "textkit/op_swap_truncate:formula",  # the kept text rstripped: a kept fresh row the bug got right
    "numkit/ctrl_invert_if_sign:formula",  # zero within 0.1: an edge row near zero
    "stockkit/op_change_const_chunk:issue_only",  # the dropped item re-appended when len % size == 1: closed
    "httpkit/remove_assign_retry_after:other_path",  # a malformed header read as 0: a row that must raise
    "numkit/op_swap_clamp:other_path",  # the lo > hi guard dropped: a row that must raise
    "calendarx/drop_clause:issue_only",  # 2000 added to the century rule: plain asserts' twin, no import pytest
    "radix/op_swap:small_only",  # positional values through math.pow: a row's string joined to itself, past 2 ** 53
    "datekit/op_change_const_day_of_year:formula",  # a leap day every fourth year: a century set into a date
    "httpkit/op_swap_backoff:formula",  # the exponent clamped at 10: the table's twin with another test's keywords
)


def _task(name: str):
    repo, bug = name.split("/")
    for path in (REALISTIC_TASKS, BUNDLED_TASKS):
        for task in load_bundled(Path(path)):
            if f"__{repo}." in task.instance_id and f"func_pm_{bug}__" in task.instance_id:
                return task
    raise LookupError(name)


def test_every_wrong_fix_applies_to_its_task_and_names_a_family(tmp_path):
    """Each wrong fix's edits apply to its task's buggy repository (an edit whose text drifted would leave the bug
    in place and test nothing), and each names one of the documented families."""
    assert len(WRONG) >= 50 and len(by_name()) == len(WRONG) and set(OPEN_HOLES) | set(ORACLE_BLIND) <= set(by_name())
    assert set(CLOSED_HOLES) <= set(by_name()) and not set(CLOSED_HOLES) & set(OPEN_HOLES)
    for wf in WRONG:
        assert wf.family in FAMILIES and wf.why, wf.name
        tree = tmp_path / wf.name.replace("/", "_").replace(":", "_").replace("#", "_")
        _task(wf.task).materialize_agent(tree)
        run = subprocess.run(["bash", "-c", apply_command(wf)], cwd=tree, capture_output=True, text=True)
        assert run.returncode == 0, (wf.name, run.stderr[-400:])


def test_the_oracle_judges_mixed_columns_by_kind_and_counts_a_narrower_domain_apart():
    """Two oracle rules the wrong fixes needed: a column holding lists of ints and lists of strs (dedupe's) judges
    an int list against the int lists (before, every list of it was `outside`, so list(set(seq)) was a `fix`); and
    an input beyond the grader's 2x band (wide_pools.WIDEN_BOUND) is where a raise is a narrower domain (a
    datetime-based fix past 9999), inside it a raise stays a disagreement."""
    dedupe = [([3, 1, 3, 2, 1],), (["b", "a", "b"],), ([],)]
    assert band(([1, 2, 3],), dedupe) == "span" and band((["a", "b"],), dedupe) == "span"
    assert band(([99],), dedupe) == "outside"  # more than ten times the largest int
    days = [(2023, 1, 1), (2024, 12, 31)]
    assert _beyond_wide((20240, 3, 1), days) and _beyond_wide((2023, 3, 63), days)
    assert not _beyond_wide((4048, 3, 1), days) and not _beyond_wide((-4000, 12, 31), days)
    assert _beyond_wide(((0, 9000),), [((0, 0),), ((3, 4),)])  # a tuple argument's items, per column


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_wrong_fixes_score_zero_unless_the_oracle_finds_them_fixes(tmp_path, backend):
    """Under every plan seed of SEEDS each selected wrong fix scores 0 on the real grader, or scores 1 and the
    oracle finds it equal to the reference inside the tested domain; the reference fix scores 1 wherever the task is
    graded. A hole of OPEN_HOLES must still pay under some seed (else it is stale: remove it)."""
    from bench.forge_rate import agent_diff

    wrong = by_name()
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    paid: dict = {}
    try:
        for name in SELECTION:
            task = _task(wrong[name].task)
            diff = agent_diff_bytes(runtime, task, "cd /testbed && " + apply_command(wrong[name]))
            reference = agent_diff(runtime, task, None, reverse_patch=True)
            for seed in SEEDS:
                with plan_seed(task, seed):
                    refused = runtime.grader.plan(task).refused
                    fixed = runtime.grader.grade(task, reference)
                    assert fixed.reward == (0.0 if refused else 1.0), (name, seed, fixed.reason)
                    paid[(name, seed)] = runtime.grader.grade(task, diff).reward
    finally:
        reset_runtime()
    judged = {name for name in SELECTION if any(paid[(name, s)] for s in SEEDS) and name not in OPEN_HOLES}
    for name in judged:
        task = _task(wrong[name].task)
        oracle = Oracle(task, tmp_path)
        try:
            verdict = oracle.judge(oracle.candidate_tree("wrong", command="cd /testbed && " + apply_command(wrong[name])))
        finally:
            oracle.close()
        assert verdict.verdict == "fix", (name, [s for s in SEEDS if paid[(name, s)]], "scored 1 and is wrong:",
                                          verdict.summary())
    stale = {name for name in SELECTION if name in OPEN_HOLES and not any(paid[(name, s)] for s in SEEDS)}
    assert not stale, ("listed as open but scoring 0 under every seed of SEEDS: remove from OPEN_HOLES", stale)
