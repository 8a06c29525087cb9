from prefixtree import Trie


def test_contains():
    t = Trie(["hello"])
    assert "hello" in t
    assert "hell" not in t


def test_size_counts_distinct():
    t = Trie(["a", "a", "b"])
    assert t.size == 2
