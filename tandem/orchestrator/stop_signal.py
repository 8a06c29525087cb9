"""SIGTERM stops a run as Ctrl-C does (a scheduler's stop: k8s, SLURM), and the stop is never lost.

The handler raises `Stop` wherever the main thread is. Python drops an exception raised while it runs
a weakref callback or a `__del__` ("Exception ignored in ..."), so a SIGTERM landing there would be
swallowed and the run would go on to its last step (measured: a counter run told to stop at step 104
ran to step 200). The handler therefore also records the request, and the loop raises it again at the
start of the next step (`raise_if_requested`).
"""

from __future__ import annotations

import signal

_requested: list[int] = []


class Stop(KeyboardInterrupt):
    """SIGTERM: stop like Ctrl-C, and exit 128 + SIGTERM as a scheduler (k8s, SLURM) expects."""


def on_sigterm(signum: int, frame) -> None:
    _requested.append(signum)
    raise Stop(f"signal {signum}")


def install() -> None:
    """SIGTERM raises Stop from now on (SIGINT keeps the disposition the process inherited)."""
    signal.signal(signal.SIGTERM, on_sigterm)


def raise_if_requested() -> None:
    """Raise Stop if a SIGTERM arrived, even one whose exception Python dropped."""
    if _requested:
        raise Stop(f"signal {_requested[0]}")
