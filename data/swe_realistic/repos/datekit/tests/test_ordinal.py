import pytest

from datekit import day_of_year, weekday


@pytest.mark.parametrize("date, expected", [
    ((2023, 1, 1), 1), ((2023, 2, 1), 32), ((2023, 3, 1), 60), ((2024, 3, 1), 61), ((2023, 12, 31), 365),
    ((2024, 12, 31), 366),
])
def test_day_of_year(date, expected):
    assert day_of_year(*date) == expected


def test_day_of_year_rejects_feb_30():
    with pytest.raises(ValueError):
        day_of_year(2024, 2, 30)


@pytest.mark.parametrize("date, expected", [
    ((2024, 1, 1), 1), ((2023, 12, 25), 1), ((2000, 2, 29), 2), ((1969, 7, 20), 0), ((2024, 3, 9), 6),
    ((2021, 2, 14), 0), ((2022, 11, 3), 4),
])
def test_weekday(date, expected):
    assert weekday(*date) == expected
