import pytest

from shapekit import in_rect, manhattan, quadrant


@pytest.mark.parametrize("x, y, expected", [(1, 1, 1), (-1, 1, 2), (-1, -1, 3), (1, -1, 4), (0, 5, 0),
                                            (3, 0, 0), (2.5, -0.5, 4)])
def test_quadrant(x, y, expected):
    assert quadrant(x, y) == expected


@pytest.mark.parametrize("p, q, expected", [((0, 0), (3, 4), 7), ((1, 1), (1, 1), 0), ((-2, 5), (2, -1), 10),
                                            ((5, 5), (2, 9), 7)])
def test_manhattan(p, q, expected):
    assert manhattan(p, q) == expected


@pytest.mark.parametrize("point, expected", [((1, 1), True), ((0, 0), True), ((4, 2), True), ((5, 1), False),
                                             ((2, -1), False), ((4, 3), True)])
def test_in_rect(point, expected):
    assert in_rect(point, (0, 0, 4, 3)) == expected
