"""Issue 46: fresh rows that keep the structure of a table's failing rows (tandem.envs.coding.structure_rows):
the diagonal, permutations, a uniform scale or shift, sign patterns, each inside the domain guard. Host only:
given a table -> the rows drawn, worked out by hand."""

from __future__ import annotations

import datetime
import random

from tandem.envs.coding.fresh_rows import fresh_rows
from tandem.envs.coding.structure_rows import Table, diagonal, permuted, signs, structure_pools, structure_rows, uniform

REORDER = [(5, 10), (10, 10), (11, 10), (0, 0)]  # stockkit's needs_reorder table (count, threshold)
TRIANGLE = [((3, 3, 3),), ((3, 3, 5),), ((5, 3, 3),), ((3, 4, 5),), ((1, 2, 3),), ((0, 1, 1),), ((1, 1, 3),),
            ((4, 7, 4),), ((2, 5, 5),)]  # shapekit's classify_triangle table (sides)
QUADRANT = [(1, 1), (-1, 1), (-1, -1), (1, -1), (0, 5), (3, 0), (2.5, -0.5)]
DATES = [((2024, 1, 1),), ((2023, 12, 25),), ((2000, 2, 29),), ((1969, 7, 20),), ((2024, 3, 9),), ((2021, 2, 14),),
         ((2022, 11, 3),)]  # datekit's weekday table


def _rows(generated) -> list:
    return [r for r in generated if r is not None]


def test_the_diagonal_sets_two_inputs_equal_and_off_by_one():
    table = Table(REORDER)
    # threshold := count (5, 6, 4); count := threshold (10, 11, 9): each inside its column (>= 0, <= 2x largest)
    assert _rows(diagonal(table, (5, 10))) == [(5, 5), (5, 6), (5, 4), (10, 10), (11, 10), (9, 10)]
    # (0, 0): -1 is no count and no threshold (every value >= 0): left out by the guard
    assert list(diagonal(table, (0, 0))) == [(0, 0), (0, 1), None, (0, 0), (1, 0), None]
    # inside a record: two sides made equal (the break_chains bug fails where the two longest are)
    assert ((3, 5, 5),) in _rows(diagonal(Table(TRIANGLE), ((3, 4, 5),)))


def test_a_failing_row_is_permuted_between_positions_of_its_record():
    assert _rows(permuted(Table(TRIANGLE), ((1, 2, 3),))) == [((1, 2, 3),), ((1, 3, 2),), ((2, 1, 3),), ((2, 3, 1),),
                                                          ((3, 1, 2),), ((3, 2, 1),)]
    # scalar columns trade places too: (count, threshold) -> (threshold, count)
    assert _rows(permuted(Table(REORDER), (5, 10))) == [(5, 10), (10, 5)]


def test_a_date_is_permuted_only_where_each_value_fits_its_new_positions_span():
    """A date's positions are of different kinds (the year's span meets neither the month's nor the day's): a
    value moves only inside the span of the position it lands on; month and day swap where the day is a month."""
    table = Table(DATES)
    assert not table.one_kind
    assert _rows(permuted(table, ((2024, 3, 9),))) == [((2024, 3, 9),), ((2024, 9, 3),)]
    assert _rows(permuted(table, ((2000, 2, 29),))) == [((2000, 2, 29),)]  # the 29th is no month
    # 20 is no month either, though within 2x the largest month (the column's guard alone lets it through)
    assert _rows(permuted(table, ((1969, 7, 20),))) == [((1969, 7, 20),)]


def test_a_row_of_one_kind_is_scaled_and_shifted_uniformly():
    # (1, 2, 3): x2, x3, +1, -1, +2 (a row of the table: kept here, dropped by structure_pools), +3; -2 and -3
    # reach a negative side (no side < 0); not every side even: no halving. (3, 6, 9) stays within 2x each
    # position's largest (10, 14, 10): a + b == c kept, where the op_flip bug fails
    assert _rows(uniform(Table(TRIANGLE), ((1, 2, 3),))) == [((2, 4, 6),), ((3, 6, 9),), ((2, 3, 4),), ((0, 1, 2),),
                                                          ((3, 4, 5),), ((4, 5, 6),)]
    # count == threshold kept: x2 (20, 20), x3 > 2x the largest, the shifts, and halved (every value even)
    assert _rows(uniform(Table(REORDER), (10, 10))) == [(20, 20), (11, 11), (9, 9), (12, 12), (8, 8), (13, 13),
                                                        (7, 7), (5, 5)]
    assert list(uniform(Table(DATES), ((2024, 3, 9),))) == []  # a date is never scaled or shifted as a whole


def test_sign_patterns_negate_where_a_column_shows_both_signs_and_zero_where_it_holds_zero():
    table = Table(QUADRANT)  # x and y both show both signs, and both hold a 0
    assert _rows(signs(table, (1, -1))) == [(-1, -1), (1, 1), (-1, 1), (0, -1), (1, 0)]
    assert _rows(signs(table, (2.5, -0.5))) == [(-2.5, -0.5), (2.5, 0.5), (-2.5, 0.5), (0.0, -0.5), (2.5, 0.0)]
    # needs_reorder's columns are never negative: only the zeros (each column holds one)
    assert _rows(signs(Table(REORDER), (5, 10))) == [(0, 10), (5, 0)]
    assert _rows(signs(Table(DATES), ((2024, 3, 9),))) == []  # no sign, no zero in a date
    # a column of negatives only shows one sign: never negated (the column's guard alone lets a positive through)
    assert _rows(signs(Table([(-1, -2), (-3, 4), (-5, 0)]), (-3, 4))) == [(-3, -4), (-3, 0)]


def test_every_drawn_row_respects_the_guard_and_no_date_is_invalid():
    for rows in (REORDER, TRIANGLE, QUADRANT, DATES):
        table = Table(rows)
        for pool in structure_pools(rows, rows).values():
            assert all(table.fits(leaf, value) for row in pool for leaf in table.leaves
                       for value in [row[leaf[0]] if leaf[1] is None else row[leaf[0]][leaf[1]]]), pool
            assert not {repr(r) for r in pool} & {repr(r) for r in rows}  # never a row of the table
    for row in (r for pool in structure_pools(DATES, DATES).values() for r in pool):
        datetime.date(*row[0])  # a valid date: weekday's datetime-based fix answers it as the reference does


def test_structure_rows_take_the_generators_in_turn_with_the_callers_rng():
    pools = structure_pools(TRIANGLE, [((1, 2, 3),)])
    assert [len(p) for p in pools.values()] == [65, 4, 4, 1]  # the diagonal of every row crowds the others
    drawn = structure_rows(TRIANGLE, [((1, 2, 3),)], random.Random(0), 4)
    assert [sum(r in p for r in drawn) for p in pools.values()] == [1, 1, 1, 1]  # one of each, not 4 diagonals
    assert drawn == structure_rows(TRIANGLE, [((1, 2, 3),)], random.Random(0), 4)  # the rng decides the draw
    assert len(structure_rows(TRIANGLE, [((1, 2, 3),)], random.Random(0), 100)) == 74  # every row, once


def test_fresh_rows_hold_the_failing_rows_structure():
    """needs_reorder fails only where count == threshold, the op_flip triangle only where a + b == c: crossed or
    moved rows almost never keep that; the structure rows do, on every seed, none a row of the table."""
    for seed in range(5):
        rng = random.Random(seed)
        reorder = fresh_rows([(c, t, c <= t) for c, t in REORDER], [2], rng, failing=[1, 3])
        equal = [r for r in reorder if r[0] == r[1]]
        assert len(equal) >= 2 and not {r[:2] for r in equal} & set(REORDER), reorder
        sides = fresh_rows([(s, None) for (s,) in TRIANGLE], [1], rng, failing=[4])
        flat = [sorted(r[0]) for r in sides]
        assert sum(a + b == c and a > 0 for a, b, c in flat) >= 2, sides


def test_no_fresh_row_equals_a_visible_row():
    """sign's table holds 0 and floats: 0.0 (zero on the axis, a float column's 0) == the visible 0, so any lookup
    of the visible rows answers it; it is no row beyond the visible ones, from any generator of fresh_rows."""
    rows = [(5, 1), (-3, -1), (0, 0), (0.5, 1), (-0.25, -1)]
    assert (0.0,) not in [r for pool in structure_pools([r[:1] for r in rows], [(0,)]).values() for r in pool]
    for seed in range(10):
        drawn = fresh_rows(rows, [1], random.Random(seed), failing=[2])
        assert drawn and all(r[0] != 0 for r in drawn), drawn
