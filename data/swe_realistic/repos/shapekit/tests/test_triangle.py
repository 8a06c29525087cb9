import pytest

from shapekit import Kind, classify_triangle


@pytest.mark.parametrize("sides, expected", [
    ((3, 3, 3), Kind.EQUILATERAL), ((3, 3, 5), Kind.ISOSCELES), ((5, 3, 3), Kind.ISOSCELES),
    ((3, 4, 5), Kind.SCALENE), ((1, 2, 3), Kind.INVALID), ((0, 1, 1), Kind.INVALID), ((1, 1, 3), Kind.INVALID),
    ((4, 7, 4), Kind.ISOSCELES), ((2, 5, 5), Kind.ISOSCELES),
])
def test_classify(sides, expected):
    assert classify_triangle(*sides) == expected


def test_kind_values():
    assert Kind("scalene") is Kind.SCALENE
