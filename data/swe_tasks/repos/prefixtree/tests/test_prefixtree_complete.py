from prefixtree import Trie


def test_complete_includes_prefix_word():
    t = Trie(["car", "cart", "carbon", "dog"])
    assert t.complete("car") == ["car", "carbon", "cart"]


def test_frequency_first():
    t = Trie(["tea", "ten", "ten", "team"])
    assert t.complete("te") == ["ten", "tea", "team"]


def test_limit_and_missing():
    t = Trie(["a", "ab", "abc"])
    assert t.complete("a", limit=2) == ["a", "ab"]
    assert t.complete("z") == []
