import pytest

from numkit import clamp, digit_sum, gcd, sign


@pytest.mark.parametrize("x, expected", [(5, 1), (-3, -1), (0, 0), (0.5, 1), (-0.25, -1)])
def test_sign(x, expected):
    assert sign(x) == expected


@pytest.mark.parametrize("x, lo, hi, expected", [(5, 0, 10, 5), (-5, 0, 10, 0), (15, 0, 10, 10), (3, 3, 3, 3)])
def test_clamp(x, lo, hi, expected):
    assert clamp(x, lo, hi) == expected


@pytest.mark.parametrize("a, b, expected", [(12, 18, 6), (-4, 6, 2), (17, 5, 1), (0, 9, 9), (-8, -12, 4)])
def test_gcd(a, b, expected):
    assert gcd(a, b) == expected


@pytest.mark.parametrize("n, expected", [(0, 0), (7, 7), (1234, 10), (-1234, 10), (99999, 45)])
def test_digit_sum(n, expected):
    assert digit_sum(n) == expected
