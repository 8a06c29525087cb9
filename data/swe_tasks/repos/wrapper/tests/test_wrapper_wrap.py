from wrapper import justify, wrap


def test_exact_fit():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]
    assert justify("aaa bbb ccc", 7) == ["aaa bbb", "ccc    "]


def test_long_word():
    assert wrap("abcdefgh ij", 3) == ["abc", "def", "gh", "ij"]


def test_whitespace():
    assert wrap("  a   b  ", 10) == ["a b"]
