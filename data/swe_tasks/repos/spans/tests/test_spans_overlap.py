import pytest

from spans import merge, overlaps


def test_overlaps():
    assert overlaps((1, 5), (5, 9))
    assert not overlaps((1, 4), (5, 9))


def test_bad_interval():
    with pytest.raises(ValueError):
        merge([(3, 1)])
