import pytest

from datekit import quarter


@pytest.mark.parametrize("month, expected", [
    (1, 1), (2, 1), (3, 1), (4, 2), (6, 2), (7, 3), (9, 3), (10, 4), (12, 4),
])
def test_quarter(month, expected):
    assert quarter(month) == expected


def test_quarters_cover_the_year():
    assert [quarter(m) for m in range(1, 13)].count(4) == 3
