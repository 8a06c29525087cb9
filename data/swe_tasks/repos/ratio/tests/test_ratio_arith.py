from ratio import Frac


def test_add():
    assert Frac(1, 2) + Frac(1, 3) == Frac(5, 6)


def test_sub():
    assert Frac(1, 2) - Frac(1, 3) == Frac(1, 6)
    assert repr(Frac(1, 2) - Frac(1, 3)) == "Frac(1, 6)"
    assert Frac(1, 3) - Frac(1, 2) == Frac(-1, 6)


def test_div():
    assert Frac(1, 2) / Frac(3, 4) == Frac(2, 3)
