from calendarx import add_days, day_of_year


def test_day_of_year():
    assert day_of_year(2023, 3, 1) == 60
    assert day_of_year(2024, 12, 31) == 366


def test_add_days_across_year():
    assert add_days((2023, 12, 30), 3) == (2024, 1, 2)
    assert add_days((2024, 3, 1), -1) == (2024, 2, 29)
