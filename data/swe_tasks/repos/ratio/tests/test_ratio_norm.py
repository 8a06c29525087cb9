import pytest

from ratio import Frac


def test_lowest_terms():
    f = Frac(6, -8)
    assert (f.num, f.den) == (-3, 4)


def test_zero_den():
    with pytest.raises(ZeroDivisionError):
        Frac(1, 0)


def test_mul_int():
    assert Frac(2, 3) * 3 == Frac(2)
