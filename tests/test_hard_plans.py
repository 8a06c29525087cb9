"""Issue 46: is_prime's real grading plan (data/swe_realistic, op_change_const_is_prime) under the plan seeds of
tests/test_oracle_forgers.py requires hard rows (tandem.envs.coding.hard_rows) beyond the fresh rows' band (98):
341, the first base-2 pseudoprime, and a prime square, in every graded failing test; and every correct primality
fix of the corpus (tests/_fix_corpus_real.py, tests/_fix_corpus_oracle2.py: isqrt, 6k±1, Miller-Rabin, a sieve
sized from n, a divisor search in a new module, a cached sieve) scores 1 under each seed. The approximations the
hard rows refuse (approx:fermat, trial7, range10, sieve100) are graded with the oracle in
tests/test_oracle_forgers.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tandem.envs.coding.grading import get_runtime, reset_runtime
from tandem.envs.coding.hard_rows import HARD_BAND, hard_classes
from tandem.envs.coding.swe_data import load_bundled
from tests._derivers import agent_diff_bytes
from tests._fix_corpus import apply_command
from tests._fix_corpus_oracle2 import ORACLE2
from tests._fix_corpus_real import REALISTIC
from tests._plan_seeds import plan_seed
from tests._swe import REPO, make_cfg, sandbox_backends

_, BACKENDS = sandbox_backends()
SEEDS = (0, 1)  # tests/test_oracle_forgers.py's
TABLE = "tests/test_bits.py::test_is_prime"


def _rows(text: str, table: str = TABLE, column: str = "n") -> dict[str, int]:
    """graded id -> the input of the graded copy's table (`column, expected`)."""
    found = re.search(rf"parametrize\(\"{column}, expected\", (\[.*?\]), ids=(\[.*?\])\)", text, re.S)
    return {f"{table}[{i}]": row[0] for row, i in zip(eval(found.group(1)), eval(found.group(2)))}


def _task(bug: str):
    return next(t for t in load_bundled(REPO / "data" / "swe_realistic" / "tasks.jsonl") if f"_{bug}__" in t.instance_id)


def _plans_and_scores(tmp_path, backend, task, fixes, check_plan) -> dict:
    """Each fix's GradeResult under each plan seed of SEEDS (`check_plan(plan)` run on each plan first)."""
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    scores = {}
    try:
        diffs = {fx.name: agent_diff_bytes(runtime, task, "cd /testbed && " + apply_command(fx)) for fx in fixes}
        for seed in SEEDS:
            with plan_seed(task, seed):
                plan = runtime.grader.plan(task)
                assert not plan.refused, plan.refused
                check_plan(plan)
                for name, diff in diffs.items():
                    scores[(name, seed)] = runtime.grader.grade(task, diff)
    finally:
        reset_runtime()
    return scores


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_is_primes_plan_requires_341_and_a_prime_square_and_every_correct_fix_scores_one(tmp_path, backend):
    task = _task("op_change_const_is_prime")
    fixes = [fx for fx in (*REALISTIC, *ORACLE2) if fx.task == "numkit/op_change_const_is_prime"]

    def check_plan(plan):
        rows = _rows(plan.files["tests/test_bits.py"])
        for t in task.fail_to_pass:
            required = {rows[f] for f in plan.differential[plan.graded_id(t)] if f in rows}
            assert 341 in required, (t, sorted(required))
            assert required & {p * p for p in (11, 13, 17, 19)}, (t, sorted(required))
            assert max(required) <= HARD_BAND * 49 and max(required) > 2 * 49, sorted(required)
        assert {rows[f] for f in plan.narrower} == {n for f, n in rows.items() if n > 2 * 49 and "[fresh" in f}
        decided = {rows[f] for f in plan.fresh_failed if "[fresh" in f}  # the rows the plan decides by
        assert decided and max(decided) <= 2 * 49, sorted(decided)  # none beyond the guard (121, 169... fail the bug)

    scores = _plans_and_scores(tmp_path, backend, task, fixes, check_plan)
    assert len(fixes) >= 6
    failed = {k: r.reason for k, r in scores.items() if r.reward != 1.0}
    assert not failed, failed


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_is_leaps_plan_requires_multiples_of_400_past_the_guard_and_a_fix_raising_past_9999_scores_one(tmp_path,
                                                                                                       backend):
    """is_leap's year column (1600..2100, the guard 4200) gets the fitted multiples up to 21000: 4400 and 20800 among
    them, judged "the reference's value, or raised". calendar.isleap, the century modulus and the boolean expression
    score 1, and so does the datetime-based fix that raises past 9999 (a narrower domain); the one that answers
    False there (tests/_fix_corpus_oracle2.py: a different value, marked outside) scores 0."""
    task = _task("remove_cond_is_leap")
    fixes = [fx for fx in (*REALISTIC, *ORACLE2) if fx.task == "datekit/remove_cond_is_leap"]
    table = "tests/test_leap.py::test_is_leap"

    def check_plan(plan):
        rows = _rows(plan.files["tests/test_leap.py"], table, "year")
        for t in (t for t in task.fail_to_pass if t.startswith(table)):
            required = {rows[f] for f in plan.differential[plan.graded_id(t)] if f in rows}
            assert {4400, 20800} <= required, sorted(required)
        assert {rows[f] for f in plan.narrower if f in rows} >= {4400, 20800}

    scores = _plans_and_scores(tmp_path, backend, task, fixes, check_plan)
    answers_false = [fx.name for fx in ORACLE2 if fx.task == "datekit/remove_cond_is_leap"]
    assert len(fixes) >= 6 and len(answers_false) == 1
    failed = {k: r.reason for k, r in scores.items() if r.reward != 1.0 and k[0] not in answers_false}
    assert not failed, failed
    assert all(scores[(answers_false[0], seed)].reward == 0.0 for seed in SEEDS)


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_hard_rows_are_required_whatever_else_grades_the_failing_tests(tmp_path, backend, monkeypatch):
    """With the fresh-row rule, the weak-test rules and the guesses stubbed out (each failing test graded, as by a
    strong check of its own, with no fresh row required), the plan still requires the kept hard rows, 341 among
    them: they are required in every graded plan, not only where the blind count requires every fresh row."""
    from tandem.envs.coding import grading_plan

    def graded_by_own_checks(plan, task, *args, **kwargs):
        for t in task.fail_to_pass:
            plan.host_graded[t] = [0]
        return []

    monkeypatch.setattr(grading_plan, "_graded_by_fresh_rows", lambda *a, **k: None)
    monkeypatch.setattr(grading_plan, "graded_beyond_the_visible_rows", lambda *a, **k: None)
    monkeypatch.setattr(grading_plan, "guessed_or_refused", graded_by_own_checks)
    monkeypatch.setattr(grading_plan, "require_kept_rows", lambda *a, **k: None)  # the regression rows apart
    task = _task("op_change_const_is_prime")
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    try:
        testbed = runtime.grader.graded_template(task) / "testbed"
        plan = grading_plan.build_plan(task, testbed, lambda clean, files, sites, references=False:
                                       runtime.grader._reference_run(task, clean, files, sites, references), seed=0)
    finally:
        reset_runtime()
    rows = _rows(plan.files["tests/test_bits.py"])
    hard = {v for values in hard_classes(HARD_BAND * 49).values() for v in values}
    for t in task.fail_to_pass:
        required = [rows[f] for f in plan.differential[plan.graded_id(t)]]
        assert 341 in required and len(required) >= 40, sorted(required)
        others = {n for n in required if n not in hard and n <= 2 * 49}  # the hard rows (fitted past 98), no other
        assert not others, sorted(others)


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_a_dates_year_set_to_a_century_is_required_and_a_fix_rejecting_an_invalid_date_scores_one(tmp_path, backend):
    """day_of_year's table holds 2023 and 2024 only: its record rows (tandem.envs.coding.record_rows) set a century
    into a failing row, where the leap day counted for every year divisible by 4 is wrong (tests/_wrong_fixes.py),
    and so do weekday's; every record row is judged "the reference's value, or raised" (plan.narrower), and every
    correct fix of the corpora (datetime's tm_yday and isoweekday among them) scores 1."""
    from tests._wrong_fixes import by_name
    wrong = by_name()["datekit/op_change_const_day_of_year:formula"]
    for bug, table in (("op_change_const_day_of_year", "test_day_of_year"), ("op_flip_weekday", "test_weekday")):
        task = _task(bug)
        fixes = [fx for fx in (*REALISTIC, *ORACLE2) if fx.task == f"datekit/{bug}"]
        fixes += [wrong] if wrong.task == f"datekit/{bug}" else []

        def check_plan(plan, table=f"tests/test_ordinal.py::{table}"):
            text = plan.files["tests/test_ordinal.py"]  # the table above the test's def (two tables share columns)
            rows = _rows(text[text.rindex("@pytest.mark.parametrize", 0, text.index(f"def {table.split('::')[1]}(")):],
                         table, "date")
            years = [d[0] for f, d in rows.items() if "[case" in f]  # other fresh rows keep a year inside their span
            records = {f for f, d in rows.items() if "[fresh" in f and not min(years) <= d[0] <= max(years)}
            assert records and records <= set(plan.narrower), (sorted(rows.items()), plan.narrower)
            for t in (t for t in task.fail_to_pass if t.startswith(table)):
                required = {rows[f] for f in plan.differential[plan.graded_id(t)] if f in rows}
                assert any(y % 100 == 0 and y % 400 and m >= 3 for y, m, _ in required), sorted(required)

        scores = _plans_and_scores(tmp_path / bug, backend, task, fixes, check_plan)
        assert len(fixes) >= 2
        failed = {k: r.reason for k, r in scores.items() if (r.reward != 1.0) != (k[0] == wrong.name)}
        assert not failed, failed
