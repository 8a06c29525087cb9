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
from tandem.envs.coding.hard_rows import HARD_BAND
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


def _rows(text: str) -> dict[str, int]:
    """graded id -> n of the graded copy's is_prime table."""
    found = re.search(r"parametrize\(\"n, expected\", (\[.*?\]), ids=(\[.*?\])\)", text, re.S)
    return {f"{TABLE}[{i}]": row[0] for row, i in zip(eval(found.group(1)), eval(found.group(2)))}


@pytest.mark.parametrize("backend", BACKENDS[-1:])
def test_is_primes_plan_requires_341_and_a_prime_square_and_every_correct_fix_scores_one(tmp_path, backend):
    task = next(t for t in load_bundled(REPO / "data" / "swe_realistic" / "tasks.jsonl")
                if "_op_change_const_is_prime__" in t.instance_id)
    fixes = [fx for fx in (*REALISTIC, *ORACLE2) if fx.task == "numkit/op_change_const_is_prime"]
    reset_runtime()
    runtime = get_runtime(make_cfg(tmp_path, sandbox={"backend": backend, "pool_size": 2}))
    scores = {}
    try:
        diffs = {fx.name: agent_diff_bytes(runtime, task, "cd /testbed && " + apply_command(fx)) for fx in fixes}
        for seed in SEEDS:
            with plan_seed(task, seed):
                plan = runtime.grader.plan(task)
                assert not plan.refused, plan.refused
                rows = _rows(plan.files["tests/test_bits.py"])
                for t in task.fail_to_pass:
                    required = {rows[f] for f in plan.differential[plan.graded_id(t)] if f in rows}
                    assert 341 in required, (seed, t, sorted(required))
                    assert required & {p * p for p in (11, 13, 17, 19)}, (seed, t, sorted(required))
                    assert max(required) <= HARD_BAND * 49 and max(required) > 2 * 49, sorted(required)
                for name, diff in diffs.items():
                    scores[(name, seed)] = runtime.grader.grade(task, diff)
    finally:
        reset_runtime()
    assert len(fixes) >= 6
    failed = {k: r.reason for k, r in scores.items() if r.reward != 1.0}
    assert not failed, failed
