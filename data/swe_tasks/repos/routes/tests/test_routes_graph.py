import math

import pytest

from routes import Graph


def test_unreachable():
    g = Graph()
    g.add_edge("a", "b", 1)
    assert g.shortest_path("b", "a") == (math.inf, [])


def test_both_ways():
    g = Graph()
    g.add_edge("x", "y", 2, both_ways=True)
    assert g.shortest_path("y", "x") == (2, ["y", "x"])


def test_negative():
    with pytest.raises(ValueError):
        Graph().add_edge("a", "b", -1)
