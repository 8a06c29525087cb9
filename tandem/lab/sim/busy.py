"""Busy-time accounting of the scheduler model: how long the GPU worked, on what, and when.

Benchmarks compare a run against the ideal fleet time, which needs the GPU's busy time split
by kind (prefill, decode, weight reload) and the stretches in which it never idled (busy
spans, written to the sim engine's trace). `BusyAccounting` is mixed into `SimScheduler`, so
the counters stay plain attributes of the scheduler (`sched.busy_s`, `sched.reload_busy_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.lab.sim.sched_types import Phase


@dataclass
class BusySpan:
    """A stretch of model time in which the GPU never idled."""

    start: float
    end: float
    busy_s: float = 0.0
    """Generation time (prefill + decode) inside the span."""
    reload_s: float = 0.0
    """Weight-reload time inside the span."""


class BusyAccounting:
    """Busy counters and spans of one scheduler; the host class owns `phase` (the GPU's current work)."""

    phase: Phase | None

    def _init_busy(self) -> None:
        self.busy_s = 0.0
        self.prefill_busy_s = 0.0
        self.decode_busy_s = 0.0
        self.reload_busy_s = 0.0
        self.spans: list[BusySpan] = []
        """Closed busy spans not yet collected by the caller (`pop_spans`)."""
        self._open_span: BusySpan | None = None

    def busy_until(self, now: float) -> float:
        """Cumulative busy model-seconds at `now`, counting the current phase up to `now`."""
        ph = self.phase
        if ph is None or now <= ph.start:
            return self.busy_s
        return self.busy_s + min(now, ph.end) - ph.start

    def pop_spans(self, close_open: bool = False) -> list[BusySpan]:
        """Closed busy spans since the last call; `close_open` also hands over the open one."""
        out, self.spans = self.spans, []
        if close_open and self._open_span is not None:
            out.append(self._open_span)
            self._open_span = None
        return out

    def _span_phase(self, phase: Phase) -> None:
        """A phase starts: it extends the open span, unless the GPU idled since that span ended."""
        sp = self._open_span
        if sp is not None and phase.start > sp.end + 1e-12:
            self.spans.append(sp)
            sp = None
        if sp is None:
            self._open_span = BusySpan(phase.start, phase.start)

    def _account(self, phase: Phase, duration: float) -> None:
        """Book `duration` model-seconds of `phase`, which ran from phase.start."""
        self.busy_s += duration
        sp = self._open_span
        if sp is not None:
            sp.end = max(sp.end, phase.start + duration)
            if phase.kind == "reload":
                sp.reload_s += duration
            else:
                sp.busy_s += duration
        if phase.kind == "prefill":
            self.prefill_busy_s += duration
        elif phase.kind in ("decode", "tail"):
            self.decode_busy_s += duration
        else:
            self.reload_busy_s += duration

    def _close_span_if_idle(self) -> None:
        if self.phase is None and self._open_span is not None:
            self.spans.append(self._open_span)
            self._open_span = None
