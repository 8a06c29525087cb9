import pytest

from heapq2 import PriorityQueue


def test_peek_and_len():
    q = PriorityQueue()
    q.push("x", 5)
    q.push("y", 2)
    assert q.peek() == "y"
    assert len(q) == 2


def test_empty():
    with pytest.raises(IndexError):
        PriorityQueue().pop()
