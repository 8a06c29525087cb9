import pytest

from numkit import is_prime, popcount


@pytest.mark.parametrize("n, expected", [
    (0, False), (1, False), (2, True), (3, True), (4, False), (9, False), (25, False), (29, True), (49, False),
])
def test_is_prime(n, expected):
    assert is_prime(n) == expected


@pytest.mark.parametrize("n, expected", [(0, 0), (1, 1), (255, 8), (256, 1), (1023, 10), (6, 2)])
def test_popcount(n, expected):
    assert popcount(n) == expected
