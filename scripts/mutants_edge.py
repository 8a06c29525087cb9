"""Mutants of issue 46's edge rows (tandem/envs/coding/edge_rows.py, its hook in fresh_rows.fresh_rows) and
regression rows (tandem/envs/coding/regression_rows.py, its hook at the end of grading_plan.build_plan): zero, the
float fractions, round numbers, string case and spacing, the guard, the one-input change, the columns' turns, the
hook, and every kept fresh row required.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py edge ["name" ...]
"""

from mutants_long import LONG

T = "tests/test_edge_rows.py::"
R = "tests/test_edge_plans.py::"
W = "tests/test_wrong_fixes.py::test_wrong_fixes_score_zero_unless_the_oracle_finds_them_fixes"
E = "tandem/envs/coding/edge_rows.py"
ROWS = "tandem/envs/coding/fresh_rows.py"
REG = "tandem/envs/coding/regression_rows.py"
PLAN = "tandem/envs/coding/grading_plan.py"

EDGE = [
    ("no zero edge", E, "    out: list = [0, 0.0] if any(type(v) is float for v in nums) else [0]", "    out: list = []",
     T + "test_an_int_column_gets_zero_where_it_shows_both_signs_and_round_numbers_inside_its_band"),
    ("no fractions of the smallest magnitude", E, "        out += [s * smallest / d for d in FRACTIONS for s in (1, -1)]",
     "        out += []", T + "test_a_float_columns_edges_are_zero_and_its_smallest_magnitude_halved_quartered_eighthed_with_both_signs"),
    ("one sign of the fractions", E, "for d in FRACTIONS for s in (1, -1)]", "for d in FRACTIONS for s in (1,)]",
     T + "test_a_float_columns_edges_are_zero_and_its_smallest_magnitude_halved_quartered_eighthed_with_both_signs"),
    ("no round numbers", E, "    return out + _round_numbers(values, rng)", "    return out",
     T + "test_an_int_column_gets_zero_where_it_shows_both_signs_and_round_numbers_inside_its_band"),
    ("no upper case", E, "out += [v.upper(), v.lower(), v.title()]", "out += [v.lower(), v.title()]",
     T + "test_a_string_columns_edges_change_case_and_spacing_inside_its_alphabet"),
    ("no doubled space", E, "out += [v.replace(\" \", \"  \", 1), v + \" \"] if", "out += [v + \" \"] if", T + "test_a_string_columns_edges_change_case_and_spacing_inside_its_alphabet"),
    ("no guard", E, "    return [e for e in _distinct(edges) if repr(e) not in own and in_domain(e, values)]",
     "    return [e for e in _distinct(edges) if repr(e) not in own]",
     T + "test_an_int_column_gets_zero_where_it_shows_both_signs_and_round_numbers_inside_its_band"),
    ("a visible row by == kept", E, "if len(out) < n and repr(row) not in seen and row not in own:",
     "if len(out) < n and repr(row) not in seen:", T + "test_every_edge_row_is_inside_the_guard_new_and_set_at_one_input"),
    ("the failing rows' strings not first", E, "edges = _text_edges(_distinct([*(first or []), *values]))",
     "edges = _text_edges(_distinct([*values, *(first or [])]))",
     T + "test_a_string_columns_edges_change_case_and_spacing_inside_its_alphabet"),
    ("no edge rows in the fresh rows", ROWS, "    picked += _unseen(edge_rows(own, failing_inputs, rng), seen)",
     "    picked += _unseen([], seen)", T + "test_the_wrong_fixes_pass_the_original_rows_and_fail_an_edge_row_on_every_draw"),
    ("no edge rows in a real plan", ROWS, "    picked += _unseen(edge_rows(own, failing_inputs, rng), seen)",
     "    picked += _unseen(edge_rows(own, failing_inputs, rng)[:0], seen)",
     R + "test_a_fix_wrong_at_a_columns_edge_scores_zero_on_every_plan"),
    ("the kept rows not required", PLAN, "        require_kept_rows(plan.differential, task.tests, [*counted, *plan.must_raise])",
     "        pass", W),
    ("only a table's first kept row required", REG, "        extra = [f for f in table if f not in have]",
     "        extra = [f for f in table if f not in have][:1]", W),
]
EDGE += LONG  # the long strings of edge_rows.repeated_rows (scripts/mutants_long.py)
