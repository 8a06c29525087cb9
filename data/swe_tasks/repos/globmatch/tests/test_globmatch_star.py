from globmatch import match


def test_star_backtracks():
    assert match("abcabd", "*abd")
    assert match("a.tar.gz", "*.gz")
    assert [n for n in ("abcabd", "abd", "abcab", "xabd", "abdx") if match(n, "*abd")] == ["abcabd", "abd", "xabd"]


def test_trailing_stars():
    assert match("abc", "abc**")


def test_star_matches_empty():
    assert match("", "*")
    assert not match("", "?")
