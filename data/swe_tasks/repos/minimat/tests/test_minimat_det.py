import pytest

from minimat import Matrix


def test_det_2x2():
    assert Matrix([[1, 2], [3, 4]]).determinant() == -2
    assert Matrix([[2, 7], [4, 3]]).determinant() == -22


def test_det_needs_swap():
    assert Matrix([[0, 1], [1, 0]]).determinant() == -1
    assert Matrix([[0, 2], [3, 0]]).determinant() == -6


def test_det_3x3():
    assert Matrix([[2, 0, 1], [1, 3, 2], [1, 1, 2]]).determinant() == pytest.approx(6)
