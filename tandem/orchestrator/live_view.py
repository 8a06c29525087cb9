"""The terminal view: a rich live panel on a TTY, one plain line per step elsewhere (CI, logs)."""

from __future__ import annotations

import sys
from typing import Any

from tandem.orchestrator.metrics import QueueMonitor

SPARK = " ▁▂▃▄▅▆▇█"
SHOWN = ("reward_mean", "response_len_mean", "loss", "kl", "entropy", "clip_frac", "grad_norm",
         "logprob_mismatch", "staleness_max", "step_time", "rollout_time", "train_time", "sync_time",
         "trainer_idle_ratio", "gen_tokens_per_s", "publish_bytes", "changed_fraction", "encode_time", "upload_time",
         "apply_time", "reload_time", "engines", "engine_seconds_per_step", "reward_errors", "rollout_errors")


def sparkline(values: list[float], width: int = 40) -> str:
    """One character per time bucket, scaled to the window's peak."""
    values = list(values)[-width:]
    if not values:
        return ""
    peak = max(values) or 1
    return "".join(SPARK[min(len(SPARK) - 1, round(v / peak * (len(SPARK) - 1)))] for v in values)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class LiveView:
    def __init__(self, total_steps: int, start_step: int, queues: QueueMonitor | None, mode: str):
        self.total, self.queues = total_steps, queues
        self.latest: dict[str, Any] = {}
        self.engine_counts: list[int] = []
        """Engines serving at each step's end (engine.autoscale): the fleet's size over the run."""
        self.status = "starting"
        self.enabled = mode == "on" or (mode == "auto" and sys.stdout.isatty())
        self._live = None
        if self.enabled:
            from rich.live import Live
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

            self._progress = Progress(TextColumn("[bold]steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
            self._task = self._progress.add_task("steps", total=total_steps, completed=start_step)
            self._live = Live(self._render(), refresh_per_second=4, get_renderable=self._render, transient=False)
            self._live.start()

    def _render(self):
        from rich.console import Group
        from rich.table import Table

        metrics = Table(show_header=False, box=None, pad_edge=False)
        for key in SHOWN:
            if key in self.latest:
                metrics.add_row(key, _fmt(self.latest[key]))
        # The heading is its own line: as a table title rich would wrap it to the table's narrow width.
        queues = Table(box=None, show_header=False)
        if self.queues is not None:
            for name, hist in self.queues.history.items():
                queues.add_row(name, sparkline(list(hist)), str(hist[-1]) if hist else "-")
        parts = [self._progress, f"[dim]{self.status}[/dim]", metrics, "engine queue depth (waiting + running)", queues]
        if self.engine_counts:
            parts += [f"engines per step (autoscaled): {sparkline(self.engine_counts)} {self.engine_counts[-1]}"]
        return Group(*parts)

    def set_status(self, text: str) -> None:
        self.status = text

    def step_done(self, row: dict[str, Any]) -> None:
        self.latest = row
        if "engines" in row:
            self.engine_counts.append(int(row["engines"]))
        if self.enabled:
            self._progress.update(self._task, completed=row["step"])
        else:
            keys = ("reward_mean", "response_len_mean", "loss", "entropy", "staleness_max", "step_time", "trainer_idle_ratio")
            keys += ("engines",) if "engines" in row else ()
            keys += tuple(k for k in ("reward_errors", "rollout_errors") if row.get(k))  # failures, when there are any
            print(f"step {row['step']}/{self.total} " + " ".join(f"{k}={_fmt(row[k])}" for k in keys), flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
