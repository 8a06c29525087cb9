"""Mutants of issue 46's fresh rows counted as blind guesses (tandem/envs/coding/blind.py, its hook in
guess_plan._graded_blind): the split of the fresh rows a forger must change, the values it must choose, and
the uniform transform that is the fix on the sample.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py blind ["name" ...]
"""

T = "tests/test_blind_odds.py::"
GRADED = "tests/test_blind_rows.py::test_fresh_rows_as_blind_guesses_pay_fixes_and_no_forger"
BLIND = "tandem/envs/coding/blind.py"
PLAN = "tandem/envs/coding/grading_plan.py"
GUESS_PLAN = "tandem/envs/coding/guess_plan.py"

BLIND_MUTANTS = [
    ("which fresh rows to change not counted", BLIND,
     "    for n in splits:\n        chance /= n\n", "",
     T + "test_a_bool_functions_wrong_fresh_rows_are_one_split_among_all_of_its_bug_value"),
    ("a selector of the inputs never picks the changed fresh rows", BLIND,
     "        return min(n, len(SELECTORS) * multinomial(", "        return max(n, len(SELECTORS) * multinomial(",
     T + "test_a_selector_that_picks_out_exactly_the_wrong_fresh_rows_is_one_in_three"),
    ("a uniform transform is a fix without a fresh row the bug fails", BLIND,
     "        if not any(r.fresh and r.failing for r in mine) or any(",
     "        if any(", T + "test_a_uniform_transform_needs_a_fresh_row_the_bug_fails"),
    ("a uniform transform judged on the fresh rows alone", BLIND,
     "        mine = [r for r in rows if r.function == function]",
     "        mine = [r for r in rows if r.function == function and r.fresh]",
     T + "test_a_transform_right_on_every_fresh_row_but_not_on_an_original_one_is_no_fix"),
    ("an argument chosen per row, not once per function", BLIND,
     "            odds[(r.function, label)] = min(odds.get((r.function, label), o[label]), o[label])",
     "            odds[(r.function, label, id(r))] = o[label]",
     T + "test_returning_one_of_the_rows_inputs_is_a_choice_of_position_made_once_per_function"),
    ("the forger's worse labelling kept", BLIND,
     "               key=lambda c: c.chance)", "               key=lambda c: -c.chance)",
     T + "test_the_forger_gets_the_likelier_of_the_two_ways_to_label_its_rows"),
    ("a value the original rows count counted again", BLIND,
     "        if key not in counted:", "        if True:",
     T + "test_a_value_of_a_family_is_counted_once_and_not_again_where_the_original_rows_count_it"),
    ("gcd's absolute value no transform", BLIND,
     '    "absolute value": lambda v: abs(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v,\n',
     "", T + "test_one_transform_right_on_every_original_and_fresh_row_is_the_fix_not_a_guess"),
    ("a selector blind to a tuple input's items", BLIND,
     "        return bool(pick(tuple(_flat(inputs))))", "        return bool(pick(inputs))",
     T + "test_a_selector_reads_the_items_of_a_tuple_input"),
    # the soundness guard against a forger that reads `[freshN]` off the call stack: rows the bug gets right judged
    ("only the fresh rows the bug fails required", GUESS_PLAN,
     "            plan.differential[t] = tables[t]",
     "            plan.differential[t] = [f for f in tables[t] if f in {f for f in tables[t] for k, v in "
     "lookup(buggy.checks, f, []) if k in plan.sites and not plan.sites[k].passes(v, f, 0)}]",
     GRADED + "[leap-unshare]"),
    ("the blind count never grades", GUESS_PLAN,
     "    if original * count.chance > GUESS_BOUND:", "    if True:", GRADED + "[clamp-unshare]"),
]
