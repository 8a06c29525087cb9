"""Issue 46: hard rows of a record column (tandem.envs.coding.record_rows), worked by hand: a date's year set to a
century inside the guard, its month and day kept, every such row judged "the reference's value, or raised"."""

from __future__ import annotations

import datetime
import random

from tandem.envs.coding.hard_rows import hard_rows
from tandem.envs.coding.record_rows import RECORD_BASES, record_rows

DAYS = [((2023, 1, 1), 1), ((2023, 2, 1), 32), ((2023, 3, 1), 60), ((2024, 3, 1), 61), ((2023, 12, 31), 365),
        ((2024, 12, 31), 366)]
WEEKDAYS = [((2024, 1, 1), 1), ((2000, 2, 29), 2), ((1969, 7, 20), 0), ((2024, 3, 9), 6)]


def _leap(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _day_of_year(year, month, day, leap=_leap):  # the reference: no check of the day
    return sum((31, 29 if leap(year) else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[:month - 1]) + day


def _day_of_year_every_fourth(year, month, day):  # the wrong fix: a leap day for every year divisible by 4
    return _day_of_year(year, month, day, lambda y: y % 4 == 0)


def _day_of_year_datetime(year, month, day):  # a correct fix: raises where the date is none
    return datetime.date(year, month, day).timetuple().tm_yday


def test_each_int_position_of_a_record_gets_round_numbers_set_into_failing_rows_every_row_beyond():
    for seed in range(8):
        found = hard_rows(DAYS, [1], random.Random(seed), [0, 1, 2, 3, 4, 5])
        assert found and all(flag is True and row[1] is None for row, flag in found)  # judged "value or raised"
        for (date, _), _flag in found:
            changed = [p for p in range(3) if all(date[p] != d[p] for d, _ in DAYS)]
            assert len(changed) == 1 and date not in [d for d, _ in DAYS], date
            assert 0 < date[changed[0]] <= 2 * max(d[changed[0]] for d, _ in DAYS)  # inside the guard
        years = {date[0] for (date, _), _ in found}
        assert any(y % 100 == 0 and y % 400 for y in years), (seed, sorted(years))  # a century past the table's


def test_the_every_fourth_year_fix_passes_the_table_and_fails_a_record_row_on_every_draw():
    assert all(_day_of_year_every_fourth(*d) == want == _day_of_year(*d) for d, want in DAYS)
    for seed in range(16):
        dates = [row[0] for row, _ in record_rows(DAYS, [1], random.Random(seed), [r for r in DAYS], [])]
        assert any(_day_of_year_every_fourth(*d) != _day_of_year(*d) for d in dates), seed


def test_a_correct_fix_answers_as_the_reference_or_raises_on_every_record_row():
    """2000-02-29 with its year set to a century is no date: the datetime fix raises there, where the reference
    answers; that is why every record row is flagged beyond (a raise passes it)."""
    raised = 0
    for seed in range(8):
        for (date, _), flag in record_rows(WEEKDAYS, [1], random.Random(seed), WEEKDAYS[1:2], []):
            try:
                assert _day_of_year_datetime(*date) == _day_of_year(*date), date
            except ValueError:
                raised += 1
                assert flag is True
    assert raised


def test_only_records_get_record_rows_at_their_int_positions_each_number_in_a_few_failing_rows():
    assert record_rows([(10, 2), (30, 4)], [1], random.Random(0), [(10, 2)], []) == []  # a scalar column
    named = record_rows([((10, "a"), 1), ((25, "b"), 2)], [1], random.Random(0), [((10, "a"), 1)], [])
    assert named and all(r[0][1] == "a" and r[0][0] % 10 == 0 and r[0][0] not in (10, 25) for r, _ in named)
    per_number: dict = {}
    for (date, _), _flag in record_rows(DAYS, [1], random.Random(0), DAYS, []):
        key = next((p, date[p]) for p in range(3) if all(date[p] != d[p] for d, _ in DAYS))
        per_number[key] = per_number.get(key, 0) + 1
    assert per_number and max(per_number.values()) <= RECORD_BASES
