from calendarx import days_in_month, is_leap


def test_century_rules():
    assert is_leap(2000)
    assert not is_leap(1900)
    assert is_leap(2024)
    assert not is_leap(2023)
    assert [y for y in (1800, 1900, 1996, 2000, 2023, 2024) if is_leap(y)] == [1996, 2000, 2024]


def test_february():
    assert days_in_month(1900, 2) == 28
    assert days_in_month(2000, 2) == 29
