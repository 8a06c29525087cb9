"""Hard rows of a record column (issue 46): a date's year set to a century, its month and day kept.

    @pytest.mark.parametrize("date, expected", [((2023, 1, 1), 1), ((2023, 3, 1), 60), ((2024, 3, 1), 61), ...])
    def test_day_of_year(date, expected):
        assert day_of_year(*date) == expected

A fix that counts the leap day for every year divisible by 4 mends every row and is wrong in 2100. The fresh rows
never draw 2100: a record's positions stay inside their own span (wide_pools._inside; a day 29 moved into another
year or month is no date), so only 2023 and 2024 are years. Here each int position of a record column gets the
round numbers of its values (edge_rows' multiples of each power of ten inside the guard: 2100, 3000 for a year),
each set into RECORD_BASES failing rows (the record's other positions kept, so most such records are real dates).

**Not every such record is one** (February 29 set into 2100). A correct fix may reject it by raising (weekday's
datetime-based fix) where the reference answers; so every record row is flagged *beyond* (hard_rows: a candidate
whose body raised passes it, GradingPlan.narrower; a value still has to be the reference's), and a row where the
reference raises is dropped as any fresh row is. The rows ride with the hard rows: required by each graded failing
test of the table (hard_rows.require_hard_rows), deciding nothing else (hard_rows.beyond).
"""

from __future__ import annotations

import random

from tandem.envs.coding.edge_rows import _round_numbers
from tandem.envs.coding.wide_pools import fixed_shape

RECORD_BASES = 2
"""Failing rows each round number of a record position is set into (drawn per number)."""


def _positions(column: list) -> list[int]:
    """The int positions of a record column (none where the column is no record)."""
    if not fixed_shape(column):
        return []
    return [p for p in range(len(column[0])) if all(type(v[p]) is int for v in column)]


def record_rows(rows: list[tuple], expected: list[int], rng: random.Random, bases: list[tuple],
                seen: list[tuple]) -> list[tuple[tuple, bool]]:
    """Each record input column's rows (None in the `expected` columns): a row of `bases` (the failing rows) with
    one int position of its record set to a round number of that position's values, none in `seen` (which takes
    them); each flagged beyond (the module's docstring)."""
    out: list[tuple[tuple, bool]] = []
    for i in (i for i in range(len(rows[0])) if i not in expected):
        column = [r[i] for r in rows]
        for p in _positions(column):
            values = [v[p] for v in column]
            for number in (n for n in _round_numbers(values, rng) if n not in values):
                for base in rng.sample(bases, min(RECORD_BASES, len(bases))):
                    record = type(base[i])((*base[i][:p], number, *base[i][p + 1:]))
                    row = tuple(record if j == i else (None if j in expected else v) for j, v in enumerate(base))
                    if row not in seen:
                        seen.append(row)
                        out.append((row, True))
    return out
