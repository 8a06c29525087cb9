from globmatch import match


def test_star_backtracks():
    assert match("abcabd", "*abd")
    assert match("a.tar.gz", "*.gz")


def test_trailing_stars():
    assert match("abc", "abc**")


def test_star_matches_empty():
    assert match("", "*")
    assert not match("", "?")
