"""Gregorian calendar helpers: leap years, month lengths, quarters, weekdays."""

_LENGTHS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
_OFFSETS = [0, 3, 2, 5, 0, 3, 5, 1, 4, 6, 2, 4]


def _check_month(month: int) -> None:
    if not 1 <= month <= 12:
        raise ValueError(f"month must be in 1..12, got {month}")


def is_leap(year: int) -> bool:
    if year % 400 == 0:
        return True
    if year % 100 == 0:
        return False
    return year % 4 == 0


def days_in_month(year: int, month: int) -> int:
    _check_month(month)
    if month == 2:
        return 29 if is_leap(year) else 28
    return _LENGTHS[month - 1]


def quarter(month: int) -> int:
    _check_month(month)
    return (month - 1) // 3 + 1


def day_of_year(year: int, month: int, day: int) -> int:
    _check_month(month)
    if not 1 <= day <= days_in_month(year, month):
        raise ValueError(f"no day {day} in {year}-{month:02d}")
    return sum(days_in_month(year, m) for m in range(1, month)) + day


def weekday(year: int, month: int, day: int) -> int:
    """0 = Sunday ... 6 = Saturday (Sakamoto's method)."""
    _check_month(month)
    if month < 3:
        year -= 1
    return (year + year // 4 - year // 100 + year // 400 + _OFFSETS[month - 1] + day) % 7
