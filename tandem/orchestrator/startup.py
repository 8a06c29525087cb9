"""Start-up in parallel, health-gated per child, and shown while it happens.

The launcher starts every engine, the router and the trainer at once (on a node, SGLang loading
its weights and Megatron loading its own no longer run back to back), then waits on all of them
in one loop. Each child has its own readiness probe and its own budget: an engine
`engine.startup_timeout_s` from its start, the trainer `trainer.startup_timeout_s` from its
start, and the router `router.startup_timeout_s` from the moment the last engine is healthy
(it cannot list engines that are not up). A child that dies, or runs out of its budget, stops
the start with its log's tail. Meanwhile the terminal shows where each child is
("engines 2/3 healthy · router waiting · trainer loading 14 s"): one line redrawn in place on
a TTY, a line per child that becomes ready elsewhere (CI, logs).
"""

from __future__ import annotations

import shutil
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, TextIO

from tandem.supervisor import Child, ChildFailed, Supervisor, tail

POLL_S = 0.2


@dataclass
class Pending:
    """One child on its way to ready."""
    child: Child
    probe: Callable[[], bool]
    what: str
    """What ready means, for messages: 'healthy (GET /health)'."""
    timeout_s: float
    timeout_key: str
    """The config key that sets `timeout_s`, named when it runs out."""
    after: list[Pending] = field(default_factory=list)
    """Children that must be ready before this one's clock starts (the router waits for engines)."""
    started: float | None = None
    ready_after_s: float | None = None

    def clock_started(self, now: float) -> bool:
        if self.started is None and all(p.ready_after_s is not None for p in self.after):
            self.started = now
        return self.started is not None


class StartupStatus:
    """What the terminal shows while children load."""

    def __init__(self, out: TextIO | None = None):
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self._width = 0

    def line(self, pending: list[Pending], now: float, t0: float) -> str:
        engines = [p for p in pending if p.child.role == "engine"]
        parts = []
        if engines:
            parts.append(f"engines {sum(p.ready_after_s is not None for p in engines)}/{len(engines)} healthy")
        for p in pending:
            if p.child.role == "engine":
                continue
            if p.ready_after_s is not None:
                parts.append(f"{p.child.name} ready")
            elif p.started is None:
                parts.append(f"{p.child.name} waiting for engines")
            else:
                parts.append(f"{p.child.name} loading {now - p.started:.0f} s")
        return f"tandem: starting ({now - t0:.0f} s) · " + " · ".join(parts)

    def begin(self, pending: list[Pending]) -> None:
        names = ", ".join(p.child.name for p in pending)
        print(f"tandem: starting {names} (logs in {pending[0].child.log_path.parent})", file=self.out, flush=True)

    def update(self, pending: list[Pending], now: float, t0: float) -> None:
        if self.tty:
            # One line, rewritten in place: longer than the terminal, it would wrap and every
            # rewrite would leave a line behind (an 80-column terminal with two engines did).
            text = self.line(pending, now, t0)[:shutil.get_terminal_size().columns - 1]
            self.out.write("\r" + text.ljust(self._width))
            self._width = len(text)
            self.out.flush()

    def became_ready(self, p: Pending) -> None:
        if not self.tty:
            print(f"tandem: {p.child.name} {p.what.split(' (')[0]} after {p.ready_after_s:.1f} s", file=self.out,
                  flush=True)

    def done(self, pending: list[Pending], t0: float, now: float) -> None:
        if self.tty:
            self.out.write("\r" + " " * self._width + "\r")
        print(f"tandem: {len(pending)} children ready in {now - t0:.1f} s", file=self.out, flush=True)


def wait_all(sup: Supervisor, pending: list[Pending], status: StartupStatus | None = None,
             clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> None:
    """Poll every child until all are ready; ChildFailed on the first death or spent budget."""
    status = status or StartupStatus()
    status.begin(pending)
    t0 = clock()
    while True:
        now = clock()
        for p in pending:
            if p.ready_after_s is not None or not p.clock_started(now):
                continue
            if not p.child.alive:
                raise ChildFailed(f"{p.child.name} exited before it was {p.what}. {p.child.describe_exit()}")
            if _answers(p.probe):
                p.ready_after_s = now - t0
                status.became_ready(p)
            elif p.started is not None and now - p.started > p.timeout_s:
                raise ChildFailed(f"{p.child.name} was not {p.what} after {p.timeout_s:.0f}s ({p.timeout_key}); "
                                  f"last lines of {p.child.log_path}:\n{tail(p.child.log_path)}")
        if all(p.ready_after_s is not None for p in pending):
            status.done(pending, t0, clock())
            return
        sup.check()  # a child that is already ready may die while the others load
        status.update(pending, now, t0)
        sleep(POLL_S)


def _answers(probe: Callable[[], bool]) -> bool:
    try:
        return bool(probe())
    except Exception:  # noqa: BLE001 - connection refused, a half-written file: not ready yet
        return False
