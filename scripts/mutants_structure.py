"""Mutants of issue 46's fresh rows that keep the failing rows' structure (tandem/envs/coding/structure_rows.py,
its hook in fresh_rows._structured): the diagonal, permutations, the uniform scale and shift, the sign patterns,
the guard each row stays inside, and the draw that takes the generators in turn.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Run: python scripts/mutate.py structure ["name" ...]
"""

T = "tests/test_structure_rows.py::"
S = "tandem/envs/coding/structure_rows.py"
ROWS = "tandem/envs/coding/fresh_rows.py"

STRUCTURE = [
    ("the diagonal not off by one", S, "for near in ([value, value + 1, value - 1] if _number(value) else [value]):",
     "for near in [value]:", T + "test_the_diagonal_sets_two_inputs_equal_and_off_by_one"),
    ("no guard on a changed value", S, "        if any(not self.fits(leaf, v) for leaf, v in changes.items()):",
     "        if False:", T + "test_the_diagonal_sets_two_inputs_equal_and_off_by_one"),
    ("a record's positions leave their span", S,
     "        return self.one_kind or not _number(value) or _inside(values, value)", "        return True",
     T + "test_a_date_is_permuted_only_where_each_value_fits_its_new_positions_span"),
    ("a date counted as one kind", S, "        self.one_kind = all(max(a[0], b[0]) <= min(a[1], b[1])",
     "        self.one_kind = all(True or max(a[0], b[0]) <= min(a[1], b[1])",
     T + "test_every_drawn_row_respects_the_guard_and_no_date_is_invalid"),
    ("no permutations", S, "        if not 2 <= len(group) <= MAX_PERMUTED:", "        if True:",
     T + "test_a_failing_row_is_permuted_between_positions_of_its_record"),
    ("no uniform scale", S, "[partial(mul, k) for k in SCALES] + ", "",
     T + "test_a_row_of_one_kind_is_scaled_and_shifted_uniformly"),
    ("every number scaled apart", S, "        yield table.changed(row, {leaf: move(v) for leaf, v in values.items()})",
     "        yield from (table.changed(row, {leaf: move(v)}) for leaf, v in values.items())",
     T + "test_a_row_of_one_kind_is_scaled_and_shifted_uniformly"),
    ("negated where a column shows one sign", S,
     "both = [leaf for leaf in table.numbers if min(table.values[leaf]) < 0 < max(table.values[leaf])]",
     "both = list(table.numbers)", T + "test_sign_patterns_negate_where_a_column_shows_both_signs_and_zero_where_it_holds_zero"),
    ("no zero on an axis", S, "        if 0 in table.values[leaf]:", "        if False:",
     T + "test_sign_patterns_negate_where_a_column_shows_both_signs_and_zero_where_it_holds_zero"),
    ("a row of the table drawn", S, "if repr(r) not in seen and r not in rows]", "]",
     T + "test_every_drawn_row_respects_the_guard_and_no_date_is_invalid"),
    ("a structure row == a visible row", S, "if repr(r) not in seen and r not in rows]", "if repr(r) not in seen]",
     T + "test_no_fresh_row_equals_a_visible_row"),
    ("a moved or crossed row == a visible row", ROWS,
     "    moved, crossed = [r for r in moved if r not in own], [r for r in crossed if r not in own]\n", "",
     T + "test_no_fresh_row_equals_a_visible_row"),
    ("one pool drawn, not the generators in turn", S,
     "        out += [p.pop() for p in pools if p][:n - len(out)]",
     "        out += [r for p in pools for r in p][:n - len(out)]\n        break",
     T + "test_structure_rows_take_the_generators_in_turn_with_the_callers_rng"),
    ("fresh rows without structure rows", ROWS, "    return _unseen(structure_rows(own, bases, rng, n // STRUCTURE_SHARE)\n",
     "    return _unseen([]\n", T + "test_fresh_rows_hold_the_failing_rows_structure"),
    ("structure rows from every row, not the failing ones", ROWS,
     "    return _unseen(structure_rows(own, bases, rng, n // STRUCTURE_SHARE)\n",
     "    return _unseen(structure_rows(own, own, rng, n // STRUCTURE_SHARE)\n",
     T + "test_fresh_rows_hold_the_failing_rows_structure"),
]
