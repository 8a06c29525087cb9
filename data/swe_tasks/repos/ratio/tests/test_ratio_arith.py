from ratio import Frac


def test_add():
    assert Frac(1, 2) + Frac(1, 3) == Frac(5, 6)


def test_sub():
    d = Frac(7, 10) - Frac(1, 4)
    assert (d.num, d.den) == (9, 20)
    assert Frac(1, 3) - Frac(1, 2) == Frac(-1, 6)


def test_div():
    assert Frac(1, 2) / Frac(3, 4) == Frac(2, 3)
