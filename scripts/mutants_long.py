"""Mutants of issue 46's long strings (tandem/envs/coding/edge_rows.py: repeated_rows, _repeated and their hook at the
end of edge_rows): a row's own string joined to itself as long as the guard admits, the failing rows' and the longest
strings first, on top of the edge rows.

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Part of the edge set (scripts/mutants_edge.py): python scripts/mutate.py edge ["name" ...]
"""

T = "tests/test_edge_rows.py::"
E = "tandem/envs/coding/edge_rows.py"
JOINED = T + "test_a_rows_string_is_joined_to_itself_as_long_as_the_guard_admits_its_other_inputs_kept"
ON_TOP = T + "test_the_long_rows_come_on_top_of_the_edge_rows_the_failing_rows_first"
MATH_POW = T + "test_the_math_pow_fix_passes_the_rows_and_fails_a_long_row_on_every_draw_the_exact_ones_never"

LONG = [
    ("no long rows", E, "    return out + _unseen_first(repeated_rows(own, bases), seen, own, LONG_ROWS)",
     "    return out", MATH_POW),
    ("the long rows within the edge rows' twelve", E,
     "    return out + _unseen_first(repeated_rows(own, bases), seen, own, LONG_ROWS)",
     "    return (out + _unseen_first(repeated_rows(own, bases), seen, own, LONG_ROWS))[:n]", ON_TOP),
    ("one long row", E, "LONG_ROWS = 3\n", "LONG_ROWS = 1\n", ON_TOP),
    ("past the guard's length", E, "    room = WIDEN_BOUND * max(map(len, column))",
     "    room = 2 * WIDEN_BOUND * max(map(len, column))", JOINED),
    ("no separator", E, "    glue = shared_separator([v for v in column if v])", "    glue = \"\"", JOINED),
    ("the separator not counted", E, "    copies = (room + len(glue)) // (len(value) + len(glue)) if value else 0",
     "    copies = room // len(value) if value else 0", JOINED),
    ("the failing rows not first", E, "out.append(((repr(row) not in failing, -len(row[c])),",
     "out.append(((False, -len(row[c])),", JOINED),
    ("the shortest strings first", E, "out.append(((repr(row) not in failing, -len(row[c])),",
     "out.append(((repr(row) not in failing, len(row[c])),", JOINED),
    ("another row's string", E, "                out.append(((repr(row) not in failing, -len(row[c])), (*row[:c], long, *row[c + 1:])))",
     "                out.append(((repr(row) not in failing, -len(row[c])), (*own[0][:c], long, *own[0][c + 1:])))",
     JOINED),
]
