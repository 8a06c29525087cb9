"""The terminal view: a rich live panel on a TTY, one plain line per step elsewhere (CI, logs), and
the closing summary either way.

The panel is laid out for the terminal it is on and fits 80 x 24 (two engines, an environment's
metrics included): the progress bar with an ETA, what the run is waiting on, the reward (latest,
smoothed, best so far), the latest metrics in as many columns as the width holds, the environment's
and agent's headline metrics when the plug-in reports them, and each engine's queue as a
sparkline. A metric that is 0 at every step so far and is only ever non-zero under other settings
(a delta sync's timings, failures) takes no row.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Group, RenderableType
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from tandem import checkpoint
from tandem.orchestrator.metrics import QueueMonitor

SPARK = " ▁▂▃▄▅▆▇█"
SHOWN = ("response_len_mean", "loss", "kl", "entropy", "clip_frac", "grad_norm", "logprob_mismatch",
         "staleness_max", "step_time", "rollout_time", "train_time", "sync_time", "trainer_idle_ratio",
         "gen_tokens_per_s", "publish_bytes", "reload_time", "changed_fraction", "encode_time", "upload_time",
         "apply_time", "engines", "engine_seconds_per_step", "reward_errors", "rollout_errors")
HIDDEN_WHILE_ZERO = frozenset({"kl", "changed_fraction", "encode_time", "upload_time", "apply_time", "reward_errors",
                               "rollout_errors"})
"""Rows that stay 0 unless the config asks for them (a KL term, a delta or remote sync) or something
failed: shown from the first step they are not 0."""
HEADLINE_ENV = ("env_success_rate", "env_turns_mean", "env_tool_calls_mean", "env_format_error_rate",
                "agent_pass_at_1", "agent_tamper_rate", "agent_exec_time_p50_s", "agent_sandbox_failures")
"""An environment's (env_*) and the coding agent's (agent_*) headline metrics, shown when reported."""
SMOOTHING = 0.3
"""Weight of the newest step in the smoothed reward (an exponential moving average)."""
CELL_WIDTH = 40
"""Columns one `name value` cell takes: 80 columns hold two, 120 three."""


def sparkline(values: Sequence[float], width: int = 40) -> str:
    """One character per time bucket, scaled to the window's peak."""
    values = list(values)[-width:]
    if not values:
        return ""
    peak = max(values) or 1
    return "".join(SPARK[min(len(SPARK) - 1, round(v / peak * (len(SPARK) - 1)))] for v in values)


def _fmt(v: Any) -> str:
    return f"{v:.4g}" if isinstance(v, float) else str(v)


class RewardTrack:
    """The reward over the steps seen: latest, smoothed, and the best smoothed value so far."""

    def __init__(self) -> None:
        self.values: list[float] = []
        self.smoothed: float | None = None
        self.best: tuple[float, int] | None = None
        """(smoothed reward, step) at its highest."""

    def add(self, step: int, reward: float) -> None:
        self.values.append(reward)
        self.smoothed = reward if self.smoothed is None else (1 - SMOOTHING) * self.smoothed + SMOOTHING * reward
        if self.best is None or self.smoothed > self.best[0]:
            self.best = (self.smoothed, step)

    def line(self) -> str:
        if self.smoothed is None or self.best is None:
            return "reward_mean -"
        return (f"reward_mean {self.values[-1]:.4g}  smoothed {self.smoothed:.4g}  "
                f"best {self.best[0]:.4g} (step {self.best[1]})")


class LiveView:
    def __init__(self, total_steps: int, start_step: int, queues: QueueMonitor | None, mode: str):
        self.total, self.queues = total_steps, queues
        self.latest: dict[str, Any] = {}
        self.reward = RewardTrack()
        self.nonzero: set[str] = set()
        """Keys of HIDDEN_WHILE_ZERO that have been non-zero at some step: shown from then on."""
        self.engine_counts: list[int] = []
        """Engines serving at each step's end (engine.autoscale): the fleet's size over the run."""
        self.status = "starting"
        self.eval_line = ""
        """The newest evaluation's figures, with the step and version they measured."""
        self.alarms: list[str] = []
        """Every alarm fired so far (tandem.eval.alarms), one line each; the panel shows the latest."""
        self.enabled = mode == "on" or (mode == "auto" and sys.stdout.isatty())
        self._live = None
        self._progress = Progress(TextColumn("[bold]steps"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                  TextColumn("ETA"), TimeRemainingColumn())
        self._task = self._progress.add_task("steps", total=total_steps, completed=start_step)
        if self.enabled:
            self._live = Live(self.render(), refresh_per_second=4, get_renderable=self.render, transient=False)
            self._live.start()

    def shown_metrics(self) -> list[tuple[str, str]]:
        return [(key, _fmt(self.latest[key])) for key in SHOWN
                if key in self.latest and (key not in HIDDEN_WHILE_ZERO or key in self.nonzero)]

    def render(self, width: int | None = None) -> Group:
        """The panel for a terminal `width` columns wide (default: the live terminal's, else 80)."""
        width = width or (self._live.console.width if self._live is not None else 80)
        parts: list[RenderableType] = [self._progress, f"[dim]{self.status}[/dim]", self.reward.line()]
        parts += [self.eval_line] if self.eval_line else []
        parts += [cells(self.shown_metrics(), width)]
        env = [(k, _fmt(self.latest[k])) for k in HEADLINE_ENV if k in self.latest]
        if env:
            parts += ["[bold]environment[/bold]", cells(env, width)]
        parts += ["engine queue depth (waiting + running)", self._queue_rows(width)]
        if self.engine_counts:
            parts += [f"engines per step (autoscaled): {sparkline(self.engine_counts, 30)} {self.engine_counts[-1]}"]
        if self.alarms:  # one line, last: a small terminal keeps the engines' rows (alarm/* are in every row)
            earlier = f" (+{len(self.alarms) - 1} earlier)" if len(self.alarms) > 1 else ""
            parts += [f"[bold red]{self.alarms[-1]}{earlier}[/bold red]"]
        return Group(*parts)

    def _queue_rows(self, width: int) -> Table:
        queues = Table(box=None, show_header=False, pad_edge=False)
        if self.queues is not None:
            for name, hist in self.queues.history.items():
                queues.add_row(name, sparkline(list(hist), max(10, min(60, width - 24))), str(hist[-1]) if hist else "-")
        return queues

    def set_status(self, text: str) -> None:
        self.status = text

    def eval_done(self, row: dict[str, Any]) -> None:
        figures = " ".join(f"{k}={_fmt(row[k])}" for k in ("eval/reward_mean", "eval/pass@1", "eval/pass@k")
                           if k in row)
        self.eval_line = (f"eval step {row['step']} (weights v{row['weight_version']}): {figures} "
                          f"in {row.get('eval_time', 0.0):.1f}s" + (" (cut short)" if row.get("cut_short") else ""))
        if not self.enabled:
            print(self.eval_line, flush=True)

    def alarm(self, line: str) -> None:
        self.alarms.append(line)
        if not self.enabled:
            print(f"ALARM {line}", flush=True)

    def step_done(self, row: dict[str, Any]) -> None:
        self.latest = row
        self.reward.add(row["step"], float(row["reward_mean"]))
        self.nonzero |= {k for k in HIDDEN_WHILE_ZERO if row.get(k)}
        if "engines" in row:
            self.engine_counts.append(int(row["engines"]))
        self._progress.update(self._task, completed=row["step"])
        if not self.enabled:
            keys: tuple[str, ...] = ("reward_mean", "response_len_mean", "loss", "entropy", "staleness_max", "step_time", "trainer_idle_ratio")
            keys += ("engines",) if "engines" in row else ()
            keys += tuple(k for k in ("reward_errors", "rollout_errors") if row.get(k))  # failures, when there are any
            print(f"step {row['step']}/{self.total} " + " ".join(f"{k}={_fmt(row[k])}" for k in keys), flush=True)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()


def cells(pairs: list[tuple[str, str]], width: int) -> Table:
    """`name value` pairs in as many columns as `width` holds, filled column by column."""
    columns = max(1, min(len(pairs), width // CELL_WIDTH)) if pairs else 1
    rows = -(-len(pairs) // columns) if pairs else 0
    grid = Table.grid(padding=(0, 1))
    for _ in range(columns):
        grid.add_column(style="dim", no_wrap=True)
        grid.add_column(no_wrap=True, min_width=10)
    for r in range(rows):
        row = []
        for c in range(columns):
            k = c * rows + r
            row += list(pairs[k]) if k < len(pairs) else ["", ""]
        grid.add_row(*row)
    return grid


def closing_summary(run_dir: Path, rows: list[dict[str, Any]], wall_s: float, command: str = "python train.py",
                    wandb_mode: str = "disabled") -> list[str]:
    """What a finished run says last: its steps and wall time, the reward at its start and end, the
    failed rewards and rollouts, the last checkpoint, where W&B wrote, and the commands (in the form
    the user typed: `command`) that continue and inspect it."""
    if not rows:
        return [f"tandem: no step finished; logs in {run_dir / 'logs'}"]
    track = RewardTrack()
    for row in rows:
        track.add(row["step"], float(row["reward_mean"]))
    assert track.best is not None  # set by the first add
    hours, rest = divmod(int(wall_s), 3600)
    steps = rows[-1]["step"]
    last = checkpoint.latest(run_dir)
    failed = {kind: sum(int(row.get(kind) or 0) for row in rows) for kind in ("reward_errors", "rollout_errors")}
    return [
        f"tandem: finished {steps} steps in {hours}:{rest // 60:02d}:{rest % 60:02d}; metrics in {run_dir / 'metrics.jsonl'}",
        f"  reward_mean: step {rows[0]['step']} {rows[0]['reward_mean']:.4g} -> step {steps} "
        f"{rows[-1]['reward_mean']:.4g} (smoothed {track.smoothed:.4g}, best {track.best[0]:.4g} at step {track.best[1]})",
        f"  last checkpoint: {last}" if last else "  last checkpoint: none (checkpoint.interval = 0): it cannot be resumed",
        *([f"  continue it:     {command} --resume {run_dir} --steps {2 * steps}"] if last else []),
        *([f"  W&B ({wandb_mode}):    {run_dir / 'wandb'}"
           + ("  (upload it: wandb sync " + str(run_dir / "wandb") + ")" if wandb_mode == "offline" else "")]
          if wandb_mode != "disabled" else []),
        f"  failed:          {failed['reward_errors']} reward(s), {failed['rollout_errors']} rollout sample(s)"
        + (f" (first of each in {run_dir / 'failures.json'})" if any(failed.values()) else ""),
        f"  inspect it:      tandem inspect {run_dir}",
    ]
