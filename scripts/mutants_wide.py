"""The `wide` set of scripts/mutate.py: fresh rows beyond the span of a parametrize table, inside its columns'
domain (tandem.envs.coding.wide_pools), half of them the failing rows moved (tandem.envs.coding.fresh_rows)."""

W = "tests/test_wide_pools.py::"
POOLS = "tandem/envs/coding/wide_pools.py"
ROWS = "tandem/envs/coding/fresh_rows.py"
WIDE = [
 ("the domain guard dropped", POOLS, "(the module's docstring).\"\"\"\n",
  "(the module's docstring).\"\"\"\n    return True\n", W + "test_an_all_positive_int_column_draws_no_negative_no_zero_and_no_float"),
 ("an int column draws floats", POOLS, "    if type(candidate) not in {type(v) for v in values}:",
  "    if False:", W + "test_an_int_column_stays_int_a_mixed_one_may_draw_floats"),
 ("negatives drawn where every value is >= 0", POOLS, "and not (min(nums) >= 0 > candidate)", "and True",
  W + "test_an_all_positive_int_column_draws_no_negative_no_zero_and_no_float"),
 ("no magnitude bound", POOLS, "return abs(candidate) <= WIDEN_BOUND * largest and", "return",
  W + "test_magnitudes_stay_within_twice_the_columns_largest"),
 ("strings of characters the column does not hold", POOLS, "return set(candidate) <= alphabet and", "return",
  W + "test_strings_change_case_reverse_double_or_drop_one_character_in_the_columns_alphabet"),
 ("no moves along the failing values' steps", POOLS,
  "return out + [value + k * s for s in _steps(failing) for k in (1, -1, 2, -2, 3, -3)]", "return out",
  W + "test_failing_values_move_along_their_own_steps"),
 ("failing inputs not mutated", ROWS, "bases = [rows[k] for k in failing] if failing else rows", "bases = rows",
  W + "test_half_the_fresh_rows_are_a_failing_row_with_one_input_moved"),
 ("crossed rows inside the span only", ROWS, "return rng.choice(wide if wide and rng.random() < 0.5 else inside)",
  "return rng.choice(inside)", W + "test_crossed_rows_draw_wider_values_too"),
 ("hide tells fresh_rows no failing row", "tandem/envs/coding/params.py", "sample(rows, columns, rng, near)",
  "sample(rows, columns, rng)", W + "test_hide_moves_the_rows_of_the_failing_task_ids"),
 ("the plan tells hide no failing test", "tandem/envs/coding/grading_plan.py",
  "task.test_files, task.tests, rng,\n                                                          task.fail_to_pass, pool=pool, hard=hard)",
  "task.test_files, task.tests, rng,\n                                                          (), pool=pool, hard=hard)",
  "tests/test_wide_rows.py::test_is_leaps_plan_holds_fresh_rows_the_bug_fails_beyond_the_visible_rows"),
 ("a record's position leaves its span", POOLS, "if _inside([v[p] for v in values], c)]", "]",
  W + "test_a_record_moves_one_position_inside_that_positions_span_and_is_never_crossed"),
 ("records crossed position by position", ROWS, "        return rng.choice(values)\n",
  "        return type(values[0])(_draw([v[p] for v in values], rng, pools) for p in range(len(values[0])))\n",
  W + "test_a_record_moves_one_position_inside_that_positions_span_and_is_never_crossed"),
]
