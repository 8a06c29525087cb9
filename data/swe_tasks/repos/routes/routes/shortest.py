"""Weighted directed graphs and shortest paths (Dijkstra)."""

import heapq


class Graph:
    def __init__(self):
        self.edges = {}

    def add_edge(self, a, b, weight: float, both_ways: bool = False) -> None:
        if weight < 0:
            raise ValueError("negative weights are not supported")
        self.edges.setdefault(a, {})[b] = weight
        self.edges.setdefault(b, {})
        if both_ways:
            self.edges[b][a] = weight

    def shortest_path(self, start, goal):
        """(distance, [start, ..., goal]) or (inf, []) when unreachable."""
        dist = {start: 0}
        prev = {}
        heap = [(0, start)]
        done = set()
        while heap:
            d, node = heapq.heappop(heap)
            if node in done:
                continue
            done.add(node)
            if node == goal:
                break
            for nxt, w in self.edges.get(node, {}).items():
                nd = d + w
                if nd < dist.get(nxt, float("inf")):
                    dist[nxt] = nd
                    prev[nxt] = node
                    heapq.heappush(heap, (nd, nxt))
        if goal not in dist:
            return float("inf"), []
        path = [goal]
        while path[-1] != start:
            path.append(prev[path[-1]])
        return dist[goal], path[::-1]
