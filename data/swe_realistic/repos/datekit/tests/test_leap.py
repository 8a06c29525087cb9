import pytest

from datekit import days_in_month, is_leap


@pytest.mark.parametrize("year, expected", [
    (2024, True), (2023, False), (1900, False), (2000, True), (2100, False), (1600, True), (1996, True),
])
def test_is_leap(year, expected):
    assert is_leap(year) == expected


@pytest.mark.parametrize("year, month, expected", [
    (2023, 1, 31), (2023, 2, 28), (2024, 2, 29), (1900, 2, 28), (2000, 2, 29), (2023, 4, 30), (2023, 12, 31),
])
def test_days_in_month(year, month, expected):
    assert days_in_month(year, month) == expected


def test_days_in_month_rejects_bad_month():
    with pytest.raises(ValueError):
        days_in_month(2023, 13)
