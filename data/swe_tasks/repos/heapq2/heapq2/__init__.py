from heapq2.pq import PriorityQueue

__all__ = ["PriorityQueue"]
