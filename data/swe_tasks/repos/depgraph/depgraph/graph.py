"""Dependency ordering (Kahn's algorithm), deterministic."""

import heapq


class CycleError(ValueError):
    pass


def toposort(deps: dict) -> list:
    """deps maps a node to the nodes it depends on; dependencies come first."""
    nodes = set(deps)
    for ds in deps.values():
        nodes.update(ds)
    indegree = {n: 0 for n in nodes}
    users = {n: [] for n in nodes}
    for node, ds in deps.items():
        for dep in set(ds):
            indegree[node] += 1
            users[dep].append(node)
    ready = [n for n in nodes if indegree[n] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for user in users[n]:
            indegree[user] -= 1
            if indegree[user] == 0:
                heapq.heappush(ready, user)
    if len(order) != len(nodes):
        raise CycleError("dependency cycle among: " + ", ".join(sorted(nodes - set(order))))
    return order
