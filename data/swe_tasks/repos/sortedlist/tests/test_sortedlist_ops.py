import pytest

from sortedlist import SortedList


def test_add_keeps_order():
    s = SortedList([30, 10])
    s.add(20)
    assert list(s) == [10, 20, 30]


def test_remove_missing():
    with pytest.raises(ValueError):
        SortedList([1]).remove(2)


def test_contains():
    assert 40 in SortedList([40])
    assert [x for x in range(10) if x in SortedList([8, 5, 8, 2])] == [2, 5, 8]
