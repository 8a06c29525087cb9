import random

from heapq2 import PriorityQueue


def test_pops_in_priority_order():
    q = PriorityQueue()
    values = list(range(50))
    random.Random(0).shuffle(values)
    for v in values:
        q.push(v, v)
    assert [q.pop() for _ in range(50)] == list(range(50))
    jobs = PriorityQueue()
    for job, priority in zip("pqrstuvwxyz", [7, 3, 9, 1, 8, 2, 6, 10, 4, 5, 0]):
        jobs.push(job, priority)
    assert "".join(jobs.pop() for _ in range(11)) == "zsuqxyvptrw"


def test_fifo_for_ties():
    q = PriorityQueue()
    for name in "abc":
        q.push(name, 1)
    q.push("urgent", 0)
    assert [q.pop() for _ in range(4)] == ["urgent", "a", "b", "c"]
