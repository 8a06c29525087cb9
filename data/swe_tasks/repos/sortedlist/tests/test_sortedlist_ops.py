import pytest

from sortedlist import SortedList


def test_add_keeps_order():
    s = SortedList([3, 1])
    s.add(2)
    assert list(s) == [1, 2, 3]


def test_remove_missing():
    with pytest.raises(ValueError):
        SortedList([1]).remove(2)


def test_contains():
    assert 4 in SortedList([4])
    assert [x for x in range(10) if x in SortedList([8, 4, 8, 2])] == [2, 4, 8]
