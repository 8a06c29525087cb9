"""Issue 46: fresh rows beyond the span of a parametrize table, inside the domain its columns show
(tandem.envs.coding.wide_pools). Host only: given columns -> the candidates drawn, worked out by hand."""

from __future__ import annotations

import ast
import datetime
import random
from unittest import mock

import tandem.envs.coding.fresh_rows as fresh_rows_module
from tandem.envs.coding.fresh_rows import fresh_rows
from tandem.envs.coding.params import hide
from tandem.envs.coding.wide_pools import in_domain, wide_pool, widened

YEARS = [2024, 2023, 1900, 2000, 2100, 1600, 1996]  # datekit's test_is_leap table; 1600 and 2000 fail the bug


def test_an_int_moves_by_one_by_the_columns_steps_doubled_and_halved():
    # column [2, 5, 9]: steps 3, 4, 7; every value positive, the largest 9 -> candidates in 1..18, none own
    # 5: +1, -1, *2, (//2 = 2 own), +3, (+4 = 9 own), +7, (-3 = 2 own), -4, (-7 < 1)
    assert widened(5, [2, 5, 9]) == [6, 4, 10, 8, 12, 1]
    # 9: +1, -1, *2, //2, +3, +4, +7, -3, -4 (-7 = 2 own)
    assert widened(9, [2, 5, 9]) == [10, 8, 18, 4, 12, 13, 16, 6]


def test_an_all_positive_int_column_draws_no_negative_no_zero_and_no_float():
    column = [1, 2, 3, 7]
    pool = wide_pool(column)
    assert pool and all(type(v) is int and 1 <= v <= 14 for v in pool), pool
    for seed in range(5):
        rows = fresh_rows([(v, v * v) for v in column], [1], random.Random(seed), failing=[3])
        assert rows and all(type(r[0]) is int and 1 <= r[0] <= 14 for r in rows), rows
    assert min(wide_pool([0, 4, 9])) == 1 and in_domain(0, [0, 4]) and not in_domain(-1, [0, 4])  # 0 shown: still >= 0
    assert not in_domain(0, [1, 4]) and not in_domain(0.0, [0.5, 2.0])  # every value > 0: so is every draw


def test_a_column_of_both_signs_draws_negations_and_zero():
    assert widened(5, [5, -3, 2]) == [6, 4, 10, 8, 0, -5]  # 5+5 = 10 once; 5+8 = 13 > 2 * 5
    assert widened(0.5, [0.5, -0.25]) == [-0.5, 1.0, 0.25, 0.0]  # +-1 = 1.5 > 1.0, -0.5; *2; /2; +0.75 > 1; 0.0
    assert not in_domain(-0.0, [0.5, -0.25]) and not in_domain(float("nan"), [0.5, -0.25])
    assert not in_domain(float("inf"), [0.5, -0.25])


def test_a_bool_column_draws_only_bools():
    assert widened(True, [True, False]) == [] and wide_pool([True, False]) == []  # both values are the column's
    assert not in_domain(1, [True, False]) and not in_domain(0.5, [True, False])
    for seed in range(5):
        rows = fresh_rows([(True, 1, "x"), (False, 2, "y"), (True, 3, "z")], [2], random.Random(seed))
        assert rows and all(type(r[0]) is bool and type(r[1]) is int and 1 <= r[1] <= 6 for r in rows), rows


def test_an_int_column_stays_int_a_mixed_one_may_draw_floats():
    assert not in_domain(2.0, [1, 3]) and in_domain(2.0, [1, 3.5])


def test_magnitudes_stay_within_twice_the_columns_largest():
    assert in_domain(4048, [2024, 1]) and not in_domain(4049, [2024, 1])
    assert max(wide_pool(YEARS)) == 4200 and min(wide_pool(YEARS)) >= 1


def test_strings_change_case_reverse_double_or_drop_one_character_in_the_columns_alphabet():
    assert widened("Ab", ["Ab", "c"]) == ["bA", "AAb", "Abb", "b", "A", "AB", "ab", "aB"]
    assert in_domain("SS", ["ss"])  # an ASCII letter's case partner belongs to the alphabet
    assert not in_domain("İ", ["i"]) and not in_domain("x", ["ab"])  # a non-ASCII letter, a new character
    assert not in_domain("", ["ab"]) and in_domain("", ["", "ab"])
    assert not in_domain("SS", ["ß", "a"]) and in_domain("SS", ["ß", "s"])
    assert widened([1, 2], [[1, 2], [3]]) == [[2, 1], [1, 1, 2], [1, 2, 2], [2], [1]]  # lists of any length


def test_a_record_moves_one_position_inside_that_positions_span_and_is_never_crossed():
    """A record (a date, a point) is moved, never crossed position by position, and each position stays inside
    its values' span: weekday's (2000, 2, 29) crossed with 2023, or a day moved to 58, is no date."""
    got = widened((3, 4), [(0, 0), (3, 4), (-2, 5)])  # position 0 spans -2..3, position 1 spans 0..5
    assert got == [(2, 4), (1, 4), (3, 3), (3, 2)]
    dates = [((2024, 1, 1), 1), ((2023, 12, 25), 1), ((2000, 2, 29), 2), ((2024, 3, 9), 6)]
    for seed in range(3):
        drawn = [r[0] for r in fresh_rows(dates, [1], random.Random(seed), failing=[3])]
        moved = [d for d in drawn if sum(a != b for a, b in zip(d, (2024, 3, 9))) == 1]
        assert moved and all(datetime.date(*d) for d in drawn), drawn  # the structure rows' too (a day set to
        # the month, month and day swapped where the day fits a month: structure_rows)


def test_failing_values_move_along_their_own_steps():
    """is_leap: the failing years 1600 and 2000 differ by 400; moved by one to three steps (and doubled, halved)
    they reach other multiples of 400 up to twice the largest year, where the bug fails again."""
    assert widened(1600, YEARS, [1600, 2000]) == [3200, 800, 1200, 2400, 2800, 400]
    assert widened(2000, YEARS, [1600, 2000]) == [4000, 1000, 2400, 2800, 1200, 3200, 800]


def test_half_the_fresh_rows_are_a_failing_row_with_one_input_moved():
    """Rows (k, 10k): the failing row (4, 40); a moved copy keeps one of its inputs, a crossed row rarely
    does: at least a third of the rows keep 4 or 40."""
    rows = [(k, 10 * k, None) for k in (1, 2, 3, 4)]
    for seed in range(3):
        with mock.patch.object(fresh_rows_module, "edge_rows", lambda *a, **k: []):  # the drawn rows alone
            drawn = fresh_rows(rows, [2], random.Random(seed), failing=[3])
        assert len(drawn) == 24 and sum(r[0] == 4 or r[1] == 40 for r in drawn) >= 10, drawn
        # shuffled: the first rows (fresh0..fresh7) are not where the moved rows are (drawn first)
        assert sum(r[0] == 4 or r[1] == 40 for r in drawn[:8]) < 8, drawn


def test_is_leaps_fresh_rows_reach_other_multiples_of_400():
    """The span 1600..2100 holds no multiple of 400 but the failing rows: the wider rows do, for every seed."""
    table = [(y, y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) for y in YEARS]
    for seed in range(5):
        years = [r[0] for r in fresh_rows(table, [1], random.Random(seed), failing=[3, 5])]
        assert len([y for y in years if y % 400 == 0]) >= 3 and all(1 <= y <= 4200 for y in years), years


def test_crossed_rows_draw_wider_values_too():
    """A moved row keeps all inputs of a row but one; rows with every input beyond the span come from crossing
    the columns' wider pools."""
    rows = [(k, 10 * k, None) for k in (1, 2, 3, 4)]
    for seed in range(3):
        assert any(r[0] > 4 and r[1] > 40 for r in fresh_rows(rows, [2], random.Random(seed), failing=[3]))


LEAP_TESTS = f'''import pytest

from datekit import is_leap


@pytest.mark.parametrize("year, expected", {[(y, y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)) for y in YEARS]!r})
def test_is_leap(year, expected):
    assert is_leap(year) == expected
'''
LEAP = "tests/test_leap.py::test_is_leap"


def fresh_inputs(source: str, test: str) -> dict[str, object]:
    """`freshN` id -> the row's first input, read from the graded copy's parametrize table of `test`."""
    func = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == test)
    mark = func.decorator_list[0]
    rows = ast.literal_eval(mark.args[1])
    ids = ast.literal_eval(next(k.value for k in mark.keywords if k.arg == "ids"))
    return {i: (r[0] if isinstance(r, tuple) else r) for i, r in zip(ids, rows) if i.startswith("fresh")}


def test_hide_moves_the_rows_of_the_failing_task_ids():
    """params.hide tells fresh_rows which rows fail (the task's FAIL_TO_PASS ids of the table)."""
    ids = tuple(f"{LEAP}[{y}-{y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)}]" for y in YEARS)
    failing = (f"{LEAP}[1600-True]", f"{LEAP}[2000-True]")
    for seed in range(5):
        hidden = hide(LEAP_TESTS, "tests/test_leap.py", ids, rng=random.Random(seed), failing=failing)
        drawn = fresh_inputs(hidden.source, "test_is_leap")
        years = [y for i, y in drawn.items() if f"{LEAP}[{i}]" not in hidden.pool]  # the pool: separating.py's
        assert len(years) >= 24 and sum(y % 400 == 0 for y in years) >= 3, years  # 24 and the structure rows
