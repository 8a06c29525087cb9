import pytest

from stockkit import chunk, dedupe, needs_reorder


@pytest.mark.parametrize("count, threshold, expected", [(5, 10, True), (10, 10, True), (11, 10, False),
                                                        (0, 0, True)])
def test_needs_reorder(count, threshold, expected):
    assert needs_reorder(count, threshold) == expected


@pytest.mark.parametrize("seq, size, expected", [
    ([1, 2, 3, 4, 5], 2, [[1, 2], [3, 4], [5]]), ([1, 2, 3, 4], 2, [[1, 2], [3, 4]]), ([], 3, []),
    ([1, 2, 3], 5, [[1, 2, 3]]),
])
def test_chunk(seq, size, expected):
    assert chunk(seq, size) == expected


@pytest.mark.parametrize("seq, expected", [([3, 1, 3, 2, 1], [3, 1, 2]), (["b", "a", "b"], ["b", "a"]),
                                           ([], [])])
def test_dedupe(seq, expected):
    assert dedupe(seq) == expected
