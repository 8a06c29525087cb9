from sortedlist import SortedList, lower_bound


def test_lower_bound_duplicates():
    assert lower_bound([1, 2, 2, 2, 3], 2) == 1
    assert lower_bound([0, 5, 5, 7, 7, 7, 9], 7) == 3


def test_lower_bound_edges():
    assert lower_bound([], 5) == 0
    assert lower_bound([1, 3], 4) == 2
    assert lower_bound([1, 3], 0) == 0


def test_count_range():
    s = SortedList([5, 1, 3, 3, 9, 4, 6])
    assert s.count_range(3, 6) == 4
