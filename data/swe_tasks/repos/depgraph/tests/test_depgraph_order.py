from depgraph import toposort


def test_chain():
    assert toposort({"c": ["b"], "b": ["a"]}) == ["a", "b", "c"]


def test_diamond():
    order = toposort({"d": ["b", "c"], "b": ["a"], "c": ["a"]})
    assert order == ["a", "b", "c", "d"]


def test_duplicate_edges():
    assert toposort({"b": ["a", "a"]}) == ["a", "b"]
