"""Gregorian calendar arithmetic on (year, month, day) tuples."""

_MONTH = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


def is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if not 1 <= month <= 12:
        raise ValueError(f"bad month {month}")
    return 29 if month == 2 and is_leap(year) else _MONTH[month - 1]


def day_of_year(year: int, month: int, day: int) -> int:
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"bad day {day}")
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def add_days(date, n: int):
    year, month, day = date
    day += n
    while day > days_in_month(year, month):
        day -= days_in_month(year, month)
        month += 1
        if month > 12:
            month, year = 1, year + 1
    while day < 1:
        month -= 1
        if month < 1:
            month, year = 12, year - 1
        day += days_in_month(year, month)
    return (year, month, day)
