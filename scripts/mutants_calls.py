"""The `calls` set of scripts/mutate.py: value checks without a table judged on fresh arguments, by a twin of the
test in the graded copy (tandem.envs.coding.call_rows, hooks in raising_rows.add_rows, grading_plan, guess_plan)."""

T = "tests/test_call_rows.py::"
CALLS = "tandem/envs/coding/call_rows.py"
RAISE = "tandem/envs/coding/raising_rows.py"
PLAN = "tandem/envs/coding/grading_plan.py"
GUESS = "tandem/envs/coding/guess_plan.py"
TWIN = T + "test_the_twin_writes_the_fixture_out_and_asks_about_the_items_it_added"
ELIGIBLE = T + "test_a_check_of_one_call_of_constants_gets_a_twin"
NOT_ELIGIBLE = T + "test_no_twin_where_the_check_is_not_one_call_of_constants"
TABLE = T + "test_the_twins_rows_are_its_tests_table_and_its_expectation_is_held"
FIXTURES = T + "test_a_fixture_is_written_out_only_when_it_is_plain"
E2E = T + "test_count_is_graded_by_its_twin_and_only_fixes_score[unshare]"
CALL_MUTANTS = [
 ("twins for passing tests too", RAISE, 'if block is None and f"{rel}::{func.name}" in failing else None',
  "if block is None else None", TWIN),
 ("the twin's rows are not its test's table", CALLS, "return owner(row) in (owner(test), owner(test) + CALLS_SUFFIX)",
  "return owner(row) == owner(test)", TABLE),
 ("the twin's expectation is not held", CALLS, "if r == WANT and isinstance(s.expected, Reference)}",
  "if r == 'nothing' and isinstance(s.expected, Reference)}", TABLE),
 ("no row asks about an item its setup added", CALLS, "if choices and rng.random() < 0.5:", "if False:", TWIN),
 ("a visible call among the rows", CALLS,
  "if all(tuple(cells[:last]) != r[:last] for r in rows) and tuple(cells) not in out:",
  "if tuple(cells) not in out:", TWIN),
 ("a truth check compared by value", CALLS, '"truth": f"bool({actual})"', '"truth": actual', ELIGIBLE),
 ("a float expectation gets a twin", CALLS, "if len(forms) != 1 or any(isinstance(want, float) for _, want, _ in checks):",
  "if len(forms) != 1:", NOT_ELIGIBLE),
 ("two callees in one twin", CALLS, "if len(forms) != 1 or any(", "if len(forms) > 9 or any(", NOT_ELIGIBLE),
 ("fixtures never written out", CALLS, "            out[node.name] = node\n", "            pass\n", FIXTURES),
 ("a fixture with parameters written out", CALLS, "and len(node.decorator_list) == 1 and not node.args.args",
  "and len(node.decorator_list) == 1", FIXTURES),
 ("a setup statement that is no call", CALLS, "    return isinstance(value, ast.Call) and all(",
  "    return all(", NOT_ELIGIBLE),
 ("few rows", CALLS, "TWIN_ROWS = 160", "TWIN_ROWS = 96", T + "test_the_rows_tell_zero_where_the_bug_says_one_from_the_fix_on_every_draw"),
 ("the plan does not hold the twins' expectations", PLAN,
  "held.update({**_held_sites(found, hidden.expected), **held_twins(found)})",
  "held.update(_held_sites(found, hidden.expected))", E2E),
 ("the blind count does not see the twin's rows", GUESS, "tables = {t: [f for f in fresh if same_table(f, t)] for t in weak}",
  "tables = {t: [f for f in fresh if f == t] for t in weak}", E2E),
]
