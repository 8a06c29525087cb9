"""Mutants of issue 46's hard rows (tandem/envs/coding/hard_rows.py and its hooks in params.py and grading_plan.py):
the band, the classes, the cap, where they apply, the raising-reference drop, the shuffle, the required flag.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py hard ["name" ...]
"""

H = "tests/test_hard_rows.py::"
HARD = "tandem/envs/coding/hard_rows.py"
PARAMS = "tandem/envs/coding/params.py"
PLAN = "tandem/envs/coding/grading_plan.py"
PLANS = "tests/test_hard_plans.py::test_hard_rows_are_required_whatever_else_grades_the_failing_tests"
BAND = H + "test_the_band_is_the_oracles_domain_and_no_visible_row_returns"
TABLES = H + "test_the_hard_numbers_match_the_published_tables"
WHERE = H + "test_only_a_counting_int_column_of_a_predicate_qualifies"
REQUIRED = H + "test_each_graded_failing_test_requires_its_tables_kept_hard_rows"
SHUFFLE = H + "test_hard_rows_ride_in_the_fresh_rows_under_fresh_ids_in_one_shuffle"

HARD_MUTANTS = [
    ("the band past the oracle's domain", HARD, "HARD_BAND = 10\n", "HARD_BAND = 20\n", BAND),
    ("the band of the fresh rows only", HARD, "HARD_BAND = 10\n", "HARD_BAND = 2\n", BAND),
    ("no base-2 pseudoprime", HARD, "FERMAT_BASES = (2, 3, 5)", "FERMAT_BASES = (3, 5)", TABLES),
    ("Carmichael numbers need not be squarefree", HARD,
     "return len(factors) > 1 and len(set(factors)) == len(factors) and n % 2 == 1", "return len(factors) > 1 and n % 2 == 1",
     TABLES),
    ("products of any two primes", HARD, "len(f := _factors(n, spf)) == 2 and f[0] >= 7", "len(f := _factors(n, spf)) == 2",
     TABLES),
    ("no prime past a bound", HARD, 'out["past_bound"] = [p for p in above if p is not None] + primes[:3]',
     'out["past_bound"] = []', TABLES),
    ("the cap checked per round only", HARD, "            if queue and len(out) < n:", "            if queue:", BAND),
    ("the classes' smallest not first", HARD, "FIRST_EACH = 2\n", "FIRST_EACH = 0\n", BAND),
    ("visible rows among the hard rows", HARD, "        values = [v for v in values if v not in own]\n",
     "        values = list(values)\n", BAND),
    ("a column far from 0 qualifies", HARD, "min(column) < 0 or min(column) > COUNTING_START", "min(column) < 0", WHERE),
    ("a negative column qualifies", HARD, "min(column) < 0 or min(column) > COUNTING_START", "min(column) > COUNTING_START",
     WHERE),
    ("a value function qualifies", HARD, "    return inputs[0] if all(type(r[expected[0]]) is bool for r in rows) else None",
     "    return inputs[0]", WHERE),
    ("two input columns qualify", HARD, "    if len(inputs) != 1 or len(expected) != 1:", "    if not inputs:", WHERE),
    ("a row the reference raised on required", HARD, "    held = [f for f in hard if f in kept]", "    held = list(hard)",
     REQUIRED),
    ("hard rows required by no test", HARD, "            plan.differential[test] = required + [f for f in rows if f not in required]",
     "            pass", REQUIRED),
    ("hard rows required in a refused plan", HARD, "    if plan.refused:\n        return\n", "", REQUIRED),
    ("the plan never requires them", PLAN, "    require_hard_rows(plan, task.fail_to_pass, kept_fresh, hard)\n", "", PLANS),
    ("hard rows drawn from the plan's generator", PARAMS, "hard_rows(rows, columns, hard_rng(rng, node_prefix))",
     "hard_rows(rows, columns, rng)", SHUFFLE),
    ("hard rows where no row fails", PARAMS, "hard_rng(rng, node_prefix)) if rng is not None and near else []",
     "hard_rng(rng, node_prefix)) if rng is not None else []", SHUFFLE),
    ("hard rows after the shuffle", PARAMS,
     [("    fresh, probes = [r for r in fresh if r not in hard] + hard, [r for r in probes if r not in hard]\n",
       "    fresh, probes = [r for r in fresh if r not in hard], [r for r in probes if r not in hard]\n"),
      ("    fresh, pooled = _with_pool(rows, columns, rng, near, fresh, probes, node_prefix)\n",
       "    fresh, pooled = _with_pool(rows, columns, rng, near, fresh, probes, node_prefix)\n"
       "    fresh, pooled = fresh + hard, pooled + [False] * len(hard)\n")], None, SHUFFLE),
]
