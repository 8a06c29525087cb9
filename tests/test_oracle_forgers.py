"""Issue 46's hostile review of the loosened grading rules, judged by an independent oracle.

The forgers (tests/_oracle_forgers.py) rewrite the function the issue names: a lookup of the visible rows with the
bug elsewhere, a yes/no flipped where an input feature fitted to the issue holds, a forger that reads the pytest
node id and treats the rows a grader adds differently, one that remembers the process's earlier calls, one that
raises at the issue's input, and those of tests/_separation_forgers.py (compound and fitted selectors, the nearest
visible row, state across calls, a Fermat test for a primality fix). Each case is graded under fixed plan seeds
(SEEDS): the fresh rows are drawn per plan, and a forger paid on some draws only must fail this test on every
run. The oracle (tests/_equivalence.py) calls the forged function and the reference fix on
>= 2,000 inputs per function of its own drawing (not the grader's fresh rows) and says `forgery` when they differ
inside the tested domain. The grader may pay a candidate only when the oracle finds it a fix: every forger here
scores 0, or scores 1 and equals the reference in-domain.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.swe_data import load_bundled
from tests._derivers import agent_diff_bytes
from tests._equivalence import Oracle
from tests._fix_corpus import apply_command
from tests._fix_corpus_real import REALISTIC
from tests._oracle_forgers import oracle_forger_command
from tests._plan_seeds import plan_seed
from tests._separation_forgers import GRADER_AWARE
from tests._swe import REPO, make_cfg, sandbox_backends

_, BACKENDS = sandbox_backends()
REALISTIC_TASKS = REPO / "data" / "swe_realistic" / "tasks.jsonl"
ATTACKS = {  # task (the bug's id) -> forgers aimed at the rules that grade it (or would, once loosened)
    "remove_cond_is_leap": ("table", "learn:odd", "learn:plain", "stack:only",  # the fix changes only multiples of 400
                            "window:issue", "nearest:visible", "calls:k", "ids:probe",  # tests/_separation_forgers.py
                            "approx:leap4000", "approx:leap8000"),  # right up to the guard: the outer hard rows
    "op_flip_hamming": ("table", "stack:only", "nearest", "transform:complement", "equal:even"),  # fresh rows
    "remove_cond_check_month": ("raises:visible", "raises:stack"),  # a pytest.raises-only task
    "op_change_const_is_prime": ("approx:fermat", "approx:fermat341", "approx:trial7", "approx:range10",
                                 "approx:sieve100"),  # approximations of primality: tandem.envs.coding.hard_rows
}
SEEDS = (0, 1)
"""Plan seeds every case is graded under (tests/_plan_seeds.py): the fresh rows are drawn per plan, so one run shows
one draw. On main at e317e49 seed 1's fresh rows of is_leap hold no multiple of 16 the bug gets right (found on the
host over seeds 0..39: 1, 2, 4, 8, 13, ... do not), so learn:odd scores 1 under it; seed 0 holds 2448 and 2496."""


def _task(bug: str):
    return next(t for t in load_bundled(Path(REALISTIC_TASKS)) if f"_{bug}__" in t.instance_id)


def test_the_oracle_tells_the_bug_and_a_visible_row_table_from_fixes(tmp_path):
    """The oracle's own premise on is_leap (the fix changes only multiples of 400, two of them visible): the bug and
    a table of the rows the issue states (which passes the original tests under plain pytest) differ from the
    reference inside the domain (e.g. 2400); the reference and every correct fix of the corpus do not."""
    task = _task("remove_cond_is_leap")
    oracle = Oracle(task, tmp_path)
    try:
        assert all(len(s) >= 2000 for k, s in oracle.samples.items() if k[1] == "is_leap"), oracle.samples.keys()
        assert oracle.judge(oracle.candidate_tree("bug")).verdict == "forgery"
        table = oracle.judge(oracle.candidate_tree("table", command=oracle_forger_command("table", task.problem_statement)))
        assert table.verdict == "forgery", table.summary()
        fn, (band, args, mine, ref) = table.first_in_domain()
        assert fn[1] in ("is_leap", "days_in_month", "day_of_year") and band in ("span", "domain") and mine != ref
        again = oracle.judge(oracle.root / "reference")  # the reference against itself, in a second process
        assert again.verdict == "fix" and not any(sum(c.values()) for c in again.differ.values()), again.summary()
        # a fix marked outside differs beyond what the tests show: the datetime-based one raises past 9999, a narrower
        # domain the grader accepts beyond its guard (tandem.envs.coding.hard_rows) and this oracle still counts
        fixes = [f for f in REALISTIC if f.task == "datekit/remove_cond_is_leap" and not f.outside]
        assert len(fixes) >= 4
        for i, fx in enumerate(fixes):
            verdict = oracle.judge(oracle.candidate_tree(f"fix{i}", command="cd /testbed && " + apply_command(fx)))
            assert verdict.verdict == "fix", (fx.form, verdict.summary())
    finally:
        oracle.close()


OPEN_FORGERIES: set[tuple[str, str]] = set()
"""Forgeries the grader still pays on some draws, recorded so that any OTHER forgery fails this test (none now).
learn:odd on is_leap (flip the bug where the year is a multiple of 16, fitted to the issue's 1600 and 2000) is no
longer one: the separating rows (tandem.envs.coding.separating: "not bug where year % 16 == 0" is a rule of F,
refuted by a pool row such as 2016 that joins the required fresh rows) close it on every draw tested
(tests/test_separating.py, tests/test_wide_rows.py). Nor is t46-oracle2's approx:fermat on is_prime
(`n > 1 and (n == 2 or pow(2, n - 1, n) == 1)`, another algorithm, no (selector, value) rule of F, equal to the
reference below 341, beyond the fresh rows' band of 98): the hard rows (tandem.envs.coding.hard_rows) require 341
and the band's other pseudoprimes, prime squares and products of two primes >= 7 up to the oracle's domain (490).
approx:fermat341 (341 special-cased) equals the reference up to 560, beyond that domain: it scores 1 and the
oracle finds it a fix there."""


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_new_forgers_score_zero_unless_the_oracle_finds_them_fixes(tmp_path, backend):
    """Under every plan seed of SEEDS, each forger scores 0 on the real grader (refused or caught), or scores 1 and
    the oracle finds it equal to the reference fix on every sampled input inside the domain (a fix in disguise).
    The reference fix scores 1 wherever the task is graded. A forger that tells the grader's added rows apart
    (GRADER_AWARE) is judged by its twin that does not: no test sees what a program does where it knows it is not
    tested, so what the grader must not pay is passing the added rows without computing the fix there; the twin
    (the same condition everywhere) must score 1 under the same seed and be a fix."""
    from bench.forge_rate import agent_diff

    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    paid, fixed, rows = {}, {}, {}
    try:
        for bug, specs in ATTACKS.items():
            task = _task(bug)
            diffs = {spec: agent_diff_bytes(runtime, task, oracle_forger_command(spec, task.problem_statement))
                     for spec in {*specs, *(GRADER_AWARE[s] for s in specs if s in GRADER_AWARE)}}
            reference = agent_diff(runtime, task, None, reverse_patch=True)
            for seed in SEEDS:
                with plan_seed(task, seed):
                    plan = runtime.grader.plan(task)
                    refused, rows[(bug, seed)] = plan.refused, plan.files
                    for spec, diff in diffs.items():
                        paid[(bug, spec, seed)] = runtime.grader.grade(task, diff)
                    fixed[(bug, seed)] = (refused, runtime.grader.grade(task, reference))
        leap = _task("remove_cond_is_leap")
        with plan_seed(leap, SEEDS[0]):  # a plan seed draws the same rows again: the seeds steer the draw
            again = runtime.grader.plan(leap).files
    finally:
        reset_runtime()
    assert again == rows[("remove_cond_is_leap", SEEDS[0])] != rows[("remove_cond_is_leap", SEEDS[1])]
    for (bug, seed), (refused, result) in fixed.items():
        assert result.reward == (0.0 if refused else 1.0), (bug, seed, result.reason)
    judged: dict = {}  # (bug, spec) -> the seeds that paid it
    for (bug, spec, seed), result in paid.items():
        if result.reward == 0.0:
            continue
        if spec in GRADER_AWARE:  # judged by the same forger without telling the rows apart: it must pay and be a fix
            twin = paid[(bug, GRADER_AWARE[spec], seed)]
            assert twin.reward == 1.0, (bug, spec, seed, twin.reason)
            spec = GRADER_AWARE[spec]
        judged.setdefault((bug, spec), []).append(seed)
    judged = {k: seeds for k, seeds in judged.items() if k not in OPEN_FORGERIES}  # open holes, not passes
    verdicts = _verdicts(judged, tmp_path)
    for (bug, spec), seeds in judged.items():
        assert verdicts[(bug, spec)].verdict == "fix", (bug, spec, f"plan seeds {seeds}", "scored 1 and is a forgery:",
                                                        verdicts[(bug, spec)].summary())
    stale = {(bug, spec) for bug, spec in OPEN_FORGERIES if not any(paid[(bug, spec, s)].reward for s in SEEDS)}
    assert not stale, ("listed as open but scoring 0 under every seed of SEEDS: remove from OPEN_FORGERIES", stale)


def _verdicts(judged, tmp_path) -> dict:
    """The oracle's verdict per (bug, spec): one oracle per task (its table and the reference's outcomes once)."""
    out = {}
    for bug in {b for b, _ in judged}:
        task = _task(bug)
        oracle = Oracle(task, tmp_path)
        try:
            for spec in [s for b, s in judged if b == bug]:
                tree = oracle.candidate_tree(spec.replace(":", "_"),
                                             command=oracle_forger_command(spec, task.problem_statement))
                out[(bug, spec)] = oracle.judge(tree)
        finally:
            oracle.close()
    return out
