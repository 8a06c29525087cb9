"""The waiting-queue order shared by every engine backend (embedded, sim).

SGLang serves its waiting queue first come, first served. With --enable-priority-scheduling
it sorts the queue by request `priority` (larger values first, SGLang's default sign) and keeps
arrival order among equal priorities; a retracted request goes back to the front of its
priority class. tandem's rollout producer gives every request the (negated) training step it
is generated for, so an engine serves the step the trainer is waiting on before rollouts that
were started early for the next step.
"""

from __future__ import annotations

from collections import deque
from typing import Any


def priority(request: Any) -> int:
    """A request's priority; SGLang treats a request without one as 0 (--default-priority-value unset)."""
    return request.priority or 0


def enqueue(queue: deque, item: Any, *, by_priority: bool, front: bool = False) -> None:
    """Put `item` in `queue` (front = a retraction). FIFO, or priority classes kept in FIFO order."""
    if not by_priority:
        (queue.appendleft if front else queue.append)(item)
        return
    p = priority(item)
    if front:  # before the first request it does not outrank or tie
        at = next((i for i, other in enumerate(queue) if priority(other) <= p), len(queue))
    else:      # after the last request that outranks or ties it
        at = next((i for i in range(len(queue) - 1, -1, -1) if priority(queue[i]) >= p), -1) + 1
    queue.insert(at, item)
