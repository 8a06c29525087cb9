from editdist import closest, levenshtein


def test_closest():
    assert closest("appel", ["apple", "maple", "apply"]) in ("apple", "apply")
    assert [levenshtein("appel", w) for w in ("apple", "maple", "apply")] == [2, 3, 2]


def test_none_close_enough():
    assert closest("zzzzzz", ["apple"]) is None
    assert levenshtein("zzzzzz", "apple") == 6
