from spans import merge, total_length


def test_merge_overlapping():
    assert merge([(1, 3), (2, 6), (8, 10)]) == [(1, 6), (8, 10)]


def test_merge_nested():
    assert merge([(1, 10), (2, 3)]) == [(1, 10)]
    assert merge([(4, 40), (6, 9), (12, 15)]) == [(4, 40)]


def test_merge_touching():
    assert merge([(1, 2), (3, 4)]) == [(1, 4)]


def test_total_length():
    assert total_length([(1, 10), (2, 3), (20, 20)]) == 11
