from editdist import levenshtein


def test_identical():
    assert levenshtein("abc", "abc") == 0
    assert levenshtein("kitten", "kitchen") == 2


def test_classic():
    assert levenshtein("kitten", "sitting") == 3
    assert levenshtein("flaw", "lawn") == 2


def test_empty():
    assert levenshtein("", "abc") == 3
