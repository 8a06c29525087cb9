"""An asyncio event loop on a simulated clock, and the clock seam the sim code reads.

`VirtualClockLoop.time()` is virtual: whenever every task waits on a timer, the loop jumps to
the next timer instead of sleeping, so a simulated run takes the CPU time its code needs and
no wall time beyond that, and repeats exactly. In-process I/O (the self-pipe that
`call_soon_threadsafe` writes, sockets of the same process) still works: the selector polls
for real, without blocking, before it moves the clock.

Nothing may run in a thread on this loop: a thread finishes at a wall time the virtual clock
knows nothing about. The loop's default executor therefore runs its work inline
(`InlineExecutor`); hand the same executor to anything that takes one.

`unix_time()` is the seam for timestamps that other processes or files compare (traces,
sample start/end times): the running loop's clock shifted to unix-like seconds. On an
ordinary loop that is monotonic time plus the offset to `time.time()` at first use, so it
tracks wall time; on a virtual loop it is the virtual clock plus a fixed epoch, so two runs
write identical traces.
"""

from __future__ import annotations

import asyncio
import selectors
import time
import weakref
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Coroutine, TypeVar

T = TypeVar("T")

VIRTUAL_EPOCH = 1_700_000_000.0
"""Unix-like time of a virtual run's t = 0 (fixed, so traces repeat byte for byte)."""

_offsets: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


class VirtualClockDeadlock(RuntimeError):
    """Every task waits, no timer is pending and no I/O is ready: nothing can ever happen again."""


def unix_time(loop: asyncio.AbstractEventLoop | None = None) -> float:
    """The loop's clock (default: the running loop's) in unix-like seconds."""
    loop = loop or asyncio.get_running_loop()
    offset = getattr(loop, "unix_offset", None)
    if offset is None:
        offset = _offsets.get(loop)
        if offset is None:  # one offset per loop, so every timestamp on it is on one scale
            offset = _offsets[loop] = time.time() - loop.time()
    return loop.time() + offset


class InlineExecutor(ThreadPoolExecutor):
    """Runs each submitted call at once, on the caller's thread (a ThreadPoolExecutor by type,
    because asyncio's default executor must be one)."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)

    def submit(self, fn, /, *args, **kwargs) -> Future:
        fut: Future = Future()
        try:
            fut.set_result(fn(*args, **kwargs))
        except BaseException as err:  # the awaiting coroutine sees it, as with a worker thread
            fut.set_exception(err)
        return fut


class _VirtualSelector:
    """Wraps the loop's real selector: poll without blocking; instead of a blocking wait, advance
    the virtual clock to the next timer."""

    def __init__(self, real: selectors.BaseSelector, loop: "VirtualClockLoop"):
        self._real, self._loop = real, loop

    def select(self, timeout: float | None = None) -> list:
        events = self._real.select(0)
        if events or timeout == 0:
            return events
        if timeout is None:
            raise VirtualClockDeadlock(self._loop.describe_deadlock())
        self._loop.advance(timeout)
        return []

    def __getattr__(self, name: str) -> Any:  # register / unregister / get_map / close
        return getattr(self._real, name)


class VirtualClockLoop(asyncio.SelectorEventLoop):
    """A selector event loop whose `time()` only moves when nothing else can happen."""

    if TYPE_CHECKING:  # asyncio's private state this loop reads, which typeshed does not declare
        _selector: Any  # the real selector, then the _VirtualSelector around it
        _scheduled: list[asyncio.TimerHandle]
        _default_executor: Executor | None

    def __init__(self, start: float = 0.0, unix_epoch: float = VIRTUAL_EPOCH):
        self._now = float(start)
        self.unix_offset = unix_epoch - float(start)
        super().__init__()
        self._selector = _VirtualSelector(self._selector, self)
        self.set_default_executor(InlineExecutor())

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        """Move the clock forward; to the next timer exactly when it is the one being waited for."""
        target = self._now + max(0.0, seconds)
        if self._scheduled and self._scheduled[0].when() <= target + 1e-9:
            target = max(self._now, self._scheduled[0].when())
        self._now = target

    def describe_deadlock(self) -> str:
        tasks = [t for t in asyncio.all_tasks(self) if not t.done()]
        names = ", ".join(sorted(t.get_name() for t in tasks)[:12])
        return (f"virtual clock deadlock at t = {self._now:.3f} s: {len(tasks)} task(s) wait and no timer "
                f"or I/O can wake them ({names}{', ...' if len(tasks) > 12 else ''}). Something waits on "
                "work outside this loop (a thread, another process), which a virtual run cannot have.")

    async def shutdown_default_executor(self) -> None:
        # asyncio's version joins the executor from a helper thread, which this loop cannot wait for.
        if self._default_executor is not None:
            self._default_executor.shutdown(wait=False)


def run(main: Coroutine[Any, Any, T], *, start: float = 0.0) -> T:
    """`asyncio.run` on a fresh `VirtualClockLoop`: run `main`, cancel what is left, close."""
    loop = VirtualClockLoop(start)
    try:
        asyncio.set_event_loop(loop)
        return loop.run_until_complete(main)
    finally:
        try:
            pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
            for t in pending:
                t.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


__all__ = ["InlineExecutor", "VIRTUAL_EPOCH", "VirtualClockDeadlock", "VirtualClockLoop", "run", "unix_time"]
