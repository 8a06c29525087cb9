from sortedlist import SortedList, lower_bound


def test_lower_bound_duplicates():
    assert lower_bound([10, 20, 20, 20, 30], 20) == 1
    assert lower_bound([0, 50, 50, 70, 70, 70, 90], 70) == 3
    assert lower_bound([11, 13, 14, 17, 19, 23, 26, 31, 31, 31, 40], 31) == 7


def test_lower_bound_edges():
    assert lower_bound([], 50) == 0
    assert lower_bound([10, 30], 40) == 2
    assert lower_bound([10, 30], 0) == 0


def test_count_range():
    s = SortedList([50, 10, 30, 30, 90, 40, 60])
    assert s.count_range(30, 60) == 4
    assert SortedList([12, 12, 12, 15, 17, 18, 21, 26, 30]).count_range(12, 25) == 7
