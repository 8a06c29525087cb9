"""Mutants of issue 46's differential checks: fresh rows of a parametrize table, judged on the reference fix's values.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py differential ["name" ...]
"""

T = "tests/test_differential.py::"
ROWS = T + "test_fresh_rows_stay_inside_the_table_and_out_of_it"
FOLD = T + "test_a_failed_or_missing_fresh_row_fails_the_test_that_requires_it"
GRADED = T + "test_a_task_graded_by_fresh_rows_pays_fixes_and_no_forger[unshare]"
PLAN = "tandem/envs/coding/grading_plan.py"
DIFF = "tandem/envs/coding/differential.py"

DIFFERENTIAL = [
    ("no fresh rows drawn", "tandem/envs/coding/params.py",
     "fresh, probes = sample(rows, columns, rng, near) if rng is not None else ([], [])", "fresh, probes = [], []", GRADED),
    ("a fresh row may repeat a row of the table", "tandem/envs/coding/fresh_rows.py",
     "if share > 0 and repr(draw) not in seen:", "if share > 0:", ROWS),
    ("a test graded by fresh rows does not require them", PLAN,
     "            plan.differential[t] = table", "            plan.differential[t] = []", GRADED),
    ("the fresh rows a test requires are not judged", PLAN,
     "return graded + sorted({f for t in graded for f in self.differential.get(t, [])})", "return graded", GRADED),
    ("a failed fresh row fails no test", DIFF,
     'failed = [f for f in rows if tests.get(f, "MISSING") != "PASSED"]',
     'failed = [f for f in rows if tests.get(f, "MISSING") == "MISSING"]', FOLD),
    ("a fresh row's expectation is not the reference's value", DIFF,
     "values = tuple(v for j, v in events if j == k)", "values = (None,)", GRADED),
]
PLAIN = T + "test_the_tasks_own_checks_are_analysed_without_the_fresh_rows"
DIFFERENTIAL += [
    ("the task's own checks analysed with the fresh rows' constants", PLAN,
     "    sources, plain, plain_aliases, _, _ = split_files(testbed, task.test_files, task.tests)",
     "    sources, plain, plain_aliases, _, _ = split_files(testbed, task.test_files, task.tests, random.Random(0))",
     PLAIN),
    ("a plain split naming other cases used anyway", PLAN,
     "    if where(plain) != where(candidates) or plain_aliases != aliases:",
     "    if where(plain) != where(candidates):", PLAIN),
]
