"""Mutants of issue 46's record rows (tandem/envs/coding/record_rows.py and its hook at the end of
hard_rows.hard_rows): a record's int positions set to round numbers in failing rows, each row judged "the
reference's value, or raised".

Each (name, file, old, new, test): scripts/mutate.py applies `old` -> `new` and runs `test`, which must fail.
Part of the hard set (scripts/mutants_hard.py): python scripts/mutate.py hard ["name" ...]
"""

T = "tests/test_record_rows.py::"
R = "tandem/envs/coding/record_rows.py"
EVERY = T + "test_each_int_position_of_a_record_gets_round_numbers_set_into_failing_rows_every_row_beyond"
FOURTH = T + "test_the_every_fourth_year_fix_passes_the_table_and_fails_a_record_row_on_every_draw"
ONLY = T + "test_only_records_get_record_rows_at_their_int_positions_each_number_in_a_few_failing_rows"

RECORD_MUTANTS = [
    ("no record rows in the hard rows", "tandem/envs/coding/hard_rows.py",
     "    return out + record_rows(rows, expected, rng, bases, seen)", "    return out", EVERY),
    ("a record row judged by its value only", R, "                        out.append((row, True))",
     "                        out.append((row, False))", EVERY),
    ("one failing row per number, the first", R, "                for base in rng.sample(bases, min(RECORD_BASES, len(bases))):",
     "                for base in bases[:1]:", FOURTH),
    ("every failing row per number", R, "                for base in rng.sample(bases, min(RECORD_BASES, len(bases))):",
     "                for base in bases:", ONLY),
    ("scalar columns taken as records", R, "    if not fixed_shape(column):\n        return []",
     "    if False:\n        return []", ONLY),
    ("the record's other positions dropped", R, "                    record = type(base[i])((*base[i][:p], number, *base[i][p + 1:]))",
     "                    record = type(base[i])((*base[i][:p], number))", EVERY),
    ("one round number per position", R, "            for number in (n for n in _round_numbers(values, rng) if n not in values):",
     "            for number in [n for n in _round_numbers(values, rng) if n not in values][:1]:", FOURTH),
]
