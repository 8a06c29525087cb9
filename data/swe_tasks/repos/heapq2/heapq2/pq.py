"""A binary min-heap priority queue, FIFO among equal priorities."""

import itertools


class PriorityQueue:
    def __init__(self):
        self._heap = []
        self._counter = itertools.count()

    def push(self, item, priority) -> None:
        self._heap.append((priority, next(self._counter), item))
        self._sift_up(len(self._heap) - 1)

    def pop(self):
        if not self._heap:
            raise IndexError("pop from empty queue")
        top = self._heap[0]
        last = self._heap.pop()
        if self._heap:
            self._heap[0] = last
            self._sift_down(0)
        return top[2]

    def peek(self):
        if not self._heap:
            raise IndexError("peek at empty queue")
        return self._heap[0][2]

    def __len__(self):
        return len(self._heap)

    def _sift_up(self, i):
        h = self._heap
        while i > 0:
            parent = (i - 1) // 2
            if h[i] < h[parent]:
                h[i], h[parent] = h[parent], h[i]
                i = parent
            else:
                break

    def _sift_down(self, i):
        h, n = self._heap, len(self._heap)
        while True:
            smallest = i
            for child in (2 * i + 1, 2 * i + 2):
                if child < n and h[child] < h[smallest]:
                    smallest = child
            if smallest == i:
                return
            h[i], h[smallest] = h[smallest], h[i]
            i = smallest
