import pytest

from lrukit import LRUCache


def test_get_put():
    c = LRUCache(3)
    c.put(1, "x")
    assert c.get(1) == "x"
    assert c.get(2, "d") == "d"
    assert (c.hits, c.misses) == (1, 1)


def test_capacity_validation():
    with pytest.raises(ValueError):
        LRUCache(0)
