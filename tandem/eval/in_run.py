"""When a run evaluates, and how it stays out of training's way.

Due: the weights after step N are evaluated when N is a multiple of eval.every_k_steps, when N = 0
(eval.before_first: the starting weights) and when N = run.steps (eval.after_last). An evaluation
starts as soon as the engines serve the step's weights, at the version they serve, and runs on
that version to its end:

- sync mode: the loop waits for it before the next step's rollouts are trained (it runs between
  the steps; the next step's rollouts, at higher priority, share the engines meanwhile);
- async mode: it runs beside training, below training's request priority; only the next weight
  sync waits for it to end, so it never spans two versions (a sample that still does marks the
  row cut_short). The loop reports the seconds it waited (eval_wait_time in the step's row).

The last step's evaluation always runs: the loop waits for it before the run ends.

Resume from checkpoint N: rows of steps after N are dropped (the interrupted run's, for weights
the resumed run retrains); the row of step N is dropped too when step N is due, and evaluated again
on the checkpoint's weights, which may have been cut off mid-evaluation. So every due step has
exactly one row: none lost, none doubled.

Rows go to <run_dir>/eval.jsonl (and TensorBoard / W&B under eval/); each evaluation's samples to
<run_dir>/eval/step_N.json, which `tandem inspect` shows beside the training ones.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Callable

from tandem.config import TandemConfig
from tandem.eval.measure import EvalOutcome, evaluate
from tandem.handoff import atomic_write_json
from tandem.rollout import RolloutContext

EVAL_ROWS = "eval.jsonl"
EVAL_SAMPLES = "eval"


def is_due(cfg: TandemConfig, steps_done: int) -> bool:
    """Whether the weights after `steps_done` steps are evaluated."""
    ev = cfg.eval
    if not ev.enabled:
        return False
    if steps_done == 0:
        return ev.before_first
    return steps_done % ev.every_k_steps == 0 or (ev.after_last and steps_done == cfg.run.steps)


def read_rows(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / EVAL_ROWS
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def keep_rows_before_resume(run_dir: Path, cfg: TandemConfig, steps_done: int) -> None:
    """A resume at checkpoint `steps_done`: drop the rows it recomputes (see the module docstring)."""
    path = Path(run_dir) / EVAL_ROWS
    if not path.exists():
        return
    refire = is_due(cfg, steps_done)
    keep = [r for r in read_rows(run_dir) if r["step"] < steps_done or (r["step"] == steps_done and not refire)]
    path.write_text("".join(json.dumps(r) + "\n" for r in keep))


def write_samples(path: Path, outcome: EvalOutcome) -> Path:
    """An evaluation's samples (and the prompts whose rollout failed), for `tandem inspect`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(path, {"step": outcome.step, "weight_version": outcome.version, "errors": outcome.errors,
                             "samples": [s.to_dict() for s in outcome.samples]}, durable=False)
    return path


class InRunEval:
    """The run's evaluations; the loop calls `after_step` (the starting weights too), `before_sync` and `finish`."""

    def __init__(self, cfg: TandemConfig, run_dir: Path, ctx: RolloutContext, rollout_fn: Callable,
                 rows: list[dict], log: Callable[[dict], None]):
        """`log`: writes one evaluation row (eval.jsonl, TensorBoard, W&B)."""
        self.cfg, self.run_dir, self.ctx, self.rollout_fn, self.rows, self.log = cfg, run_dir, ctx, rollout_fn, rows, log
        self.background = cfg.effective_staleness > 0
        self._task: asyncio.Task | None = None
        self.latest: dict | None = None
        """The newest evaluation row (the alarms and the live view read it)."""

    @property
    def enabled(self) -> bool:
        return self.cfg.eval.enabled and bool(self.rows)

    async def after_step(self, steps_done: int, version: int) -> float:
        """The engines serve `version`, the weights after `steps_done` steps: evaluate them if due.
        Seconds the loop waited (sync mode waits for the whole evaluation)."""
        if not (self.enabled and is_due(self.cfg, steps_done)):
            return 0.0
        await self.before_sync()  # one evaluation at a time (a step whose version did not change)
        self._task = asyncio.create_task(self._run(steps_done, version), name=f"eval-step-{steps_done}")
        return 0.0 if self.background else await self.before_sync()

    async def before_sync(self) -> float:
        """Wait for a running evaluation to end on its version; the seconds waited."""
        if self._task is None:
            return 0.0
        started = asyncio.get_running_loop().time()
        task, self._task = self._task, None
        await task
        return asyncio.get_running_loop().time() - started

    async def finish(self) -> float:
        """The run's last evaluation ends before the run does."""
        return await self.before_sync()

    async def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self, steps_done: int, version: int) -> None:
        outcome = await evaluate(self.ctx, self.rollout_fn, self.rows, steps_done, version)
        await asyncio.to_thread(write_samples, Path(self.run_dir) / EVAL_SAMPLES / f"step_{steps_done}.json", outcome)
        self.latest = outcome.row
        self.log(outcome.row)
