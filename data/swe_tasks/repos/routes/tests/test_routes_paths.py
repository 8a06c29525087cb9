from routes import Graph


def make():
    g = Graph()
    g.add_edge("a", "b", 7)
    g.add_edge("a", "c", 2)
    g.add_edge("c", "b", 3)
    g.add_edge("b", "d", 1)
    return g


def test_prefers_cheaper_detour():
    assert make().shortest_path("a", "b") == (5, ["a", "c", "b"])
    g = make()
    g.add_edge("a", "e", 9)
    g.add_edge("c", "e", 4)
    assert g.shortest_path("a", "e") == (6, ["a", "c", "e"])


def test_longer_path():
    assert make().shortest_path("a", "d") == (6, ["a", "c", "b", "d"])
