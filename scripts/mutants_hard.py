"""Mutants of issue 46's hard rows (tandem/envs/coding/hard_rows.py and its hooks in params.py, grading_plan.py,
verdict.py and judging.py): the band, the classes, the fitted multiples, the cap, where they apply, the
raising-reference drop, the shuffle, the required flag, "the reference's value or raised" beyond the guard.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py hard ["name" ...]
"""

from mutants_records import RECORD_MUTANTS

H = "tests/test_hard_rows.py::"
HARD = "tandem/envs/coding/hard_rows.py"
PARAMS = "tandem/envs/coding/params.py"
PLAN = "tandem/envs/coding/grading_plan.py"
PLANS = "tests/test_hard_plans.py::test_hard_rows_are_required_whatever_else_grades_the_failing_tests"
BAND = H + "test_the_band_is_the_oracles_domain_and_no_visible_row_returns"
TABLES = H + "test_the_hard_numbers_match_the_published_tables"
WHERE = H + "test_every_non_negative_int_column_of_a_predicate_qualifies"
YEARS = H + "test_a_year_column_gets_the_fitted_multiples_beyond_the_guard_and_no_number_class"
RAISED = H + "test_beyond_the_guard_a_row_whose_body_raised_passes_and_a_wrong_value_does_not"
VERDICT = "tandem/envs/coding/verdict.py"
PRIME = "tests/test_hard_plans.py::test_is_primes_plan_requires_341_and_a_prime_square_and_every_correct_fix_scores_one"
LEAP = ("tests/test_hard_plans.py::"
        "test_is_leaps_plan_requires_multiples_of_400_past_the_guard_and_a_fix_raising_past_9999_scores_one")
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
    ("visible rows among the hard rows", HARD, "        values = [v for v in numbers if v not in own]\n",
     "        values = list(numbers)\n", BAND),
    ("a negative column qualifies", HARD, " and min(r[i] for r in rows) >= 0\n", "\n", WHERE),
    ("a value function qualifies", HARD, "    if len(expected) != 1 or not all(type(r[expected[0]]) is bool for r in rows):",
     "    if len(expected) != 1:", WHERE),
    ("bools count as ints", HARD, "if all(type(r[i]) is int for r in rows)", "if all(isinstance(r[i], int) for r in rows)",
     WHERE),
    ("no number class on a counting column", HARD, "if min(column) <= COUNTING_START else []", "if False else []", BAND),
    ("number classes on a year column", HARD, "if min(column) <= COUNTING_START else []", "if True else []", YEARS),
    ("no fitted multiples", HARD, "    if failing:\n        queues.append(", "    if False:\n        queues.append(",
     YEARS),
    ("fitted multiples inside the guard", HARD, "    guard, top = WIDEN_BOUND * max(column), min(",
     "    guard, top = 0, min(", YEARS),
    ("fitted multiples past the band", HARD, "max(column), min(HARD_BAND * max(column), HARD_LIMIT)",
     "max(column), min(2 * HARD_BAND * max(column), HARD_LIMIT)", YEARS),
    ("every hard row judged as beyond the guard", HARD, "out.append((row, not in_domain(v, column)))",
     "out.append((row, True))", SHUFFLE),
    ("a raise fails beyond the guard", VERDICT, "        if t in narrower and status ==", "        if False and status ==",
     RAISED),
    ("any failure passes beyond the guard", VERDICT, 'status == "FAILED" and lookup(stream.raised, t) and not any(',
     'status == "FAILED" and not any(', RAISED),
    ("a value written then a raise passes", VERDICT,
     " and lookup(stream.raised, t) and not any(k in sites for k, _ in events):", " and lookup(stream.raised, t):",
     RAISED),
    ("the judging child never told", "tandem/envs/coding/judging.py",
     "returncode, stdout, sites, required, narrower, must_raise)",
     "returncode, stdout, sites, required, (), must_raise)", LEAP),
    ("outer hard rows decide", PLAN, "    (kept_fresh, outer), fresh = beyond(hard, kept_fresh), beyond(hard, fresh)[0]",
     "    (kept_fresh, outer), fresh = (kept_fresh, []), fresh", PRIME),
    ("a row the reference raised on required", HARD, "    held = [f for f in hard if f in kept]", "    held = list(hard)",
     REQUIRED),
    ("hard rows required by no test", HARD, "            plan.differential[test] = required + [f for f in rows if f not in required]",
     "            pass", REQUIRED),
    ("hard rows required in a refused plan", HARD, "    if plan.refused:\n        return\n", "", REQUIRED),
    ("the plan never requires them", PLAN, "    require_hard_rows(plan, task.fail_to_pass, [*kept_fresh, *outer], hard)\n", "",
     PLANS),
    ("hard rows drawn from the plan's generator", PARAMS, "hard_rows(rows, columns, hard_rng(rng, node_prefix),",
     "hard_rows(rows, columns, rng,", SHUFFLE),
    ("hard rows where no row fails", PARAMS, "if rng is not None and near and (found :=", "if rng is not None and (found :=",
     SHUFFLE),
    ("hard rows after the shuffle", PARAMS,
     [("    fresh, probes = [r for r in fresh if r not in hard] + list(hard), [r for r in probes if r not in hard]\n",
       "    fresh, probes = [r for r in fresh if r not in hard], [r for r in probes if r not in hard]\n"),
      ("    fresh, pooled = _with_pool(rows, columns, rng, near, fresh, probes, node_prefix)\n",
       "    fresh, pooled = _with_pool(rows, columns, rng, near, fresh, probes, node_prefix)\n"
       "    fresh, pooled = fresh + list(hard), pooled + [False] * len(hard)\n")], None, SHUFFLE),
]
HARD_MUTANTS += RECORD_MUTANTS  # the record rows of hard_rows (scripts/mutants_records.py)
