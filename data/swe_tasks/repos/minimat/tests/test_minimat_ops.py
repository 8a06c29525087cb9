import pytest

from minimat import Matrix


def test_matmul():
    a = Matrix([[1, 2], [3, 4]])
    assert a @ Matrix.identity(2) == a
    assert a @ Matrix([[0, 1], [1, 0]]) == Matrix([[2, 1], [4, 3]])


def test_shape_mismatch():
    with pytest.raises(ValueError):
        Matrix([[1, 2]]) @ Matrix([[1, 2]])


def test_transpose():
    assert Matrix([[1, 2, 3]]).transpose().shape == (3, 1)
