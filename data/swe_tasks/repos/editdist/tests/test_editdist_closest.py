from editdist import closest


def test_closest():
    assert closest("appel", ["apple", "maple", "apply"]) in ("apple", "apply")


def test_none_close_enough():
    assert closest("zzzzzz", ["apple"]) is None
