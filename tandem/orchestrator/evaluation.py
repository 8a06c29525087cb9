"""What the RL loop asks of evaluation and the alarms, in one place: when to evaluate (in-run
evaluation, tandem.eval.in_run), what each step row adds (eval_wait_time, alarm/*), what the live
view says when an alarm fires, and whether the run stops on it (run.stop_on_alarm)."""

from __future__ import annotations

import json
from pathlib import Path

from tandem.config import TandemConfig
from tandem.eval.alarms import Alarm, AlarmWatch
from tandem.handoff import TrainResult
from tandem.eval.in_run import InRunEval, keep_rows_before_resume, read_rows
from tandem.orchestrator.live_view import LiveView
from tandem.orchestrator.metrics import MetricsLog


class Evaluation:
    def __init__(self, cfg: TandemConfig, run_dir: Path, metrics: MetricsLog, view: LiveView, start_step: int,
                 evaluator: InRunEval | None = None):
        """`evaluator`: the run's in-run evaluation (None: eval off; the alarms still watch)."""
        self.cfg, self.metrics, self.view, self.evaluator = cfg, metrics, view, evaluator
        path = Path(run_dir) / "metrics.jsonl"
        past = [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []
        if evaluator is not None and start_step:
            keep_rows_before_resume(run_dir, cfg, start_step)
        self.alarms = AlarmWatch(cfg.alarms, past, read_rows(run_dir))
        if evaluator is not None:
            evaluator.log = self._eval_logged
        self._waits = [0.0, 0.0]
        """Seconds the loop waited on evaluation within the current step's step_time, and the next's."""

    @classmethod
    def of_run(cls, cfg: TandemConfig, run_dir: Path, metrics: MetricsLog, view: LiveView, start_step: int, ctx,
               rollout_fn, held_out: list[dict]) -> Evaluation:
        evaluator = InRunEval(cfg, run_dir, ctx, rollout_fn, held_out, metrics.log_eval) if cfg.eval.enabled else None
        return cls(cfg, run_dir, metrics, view, start_step, evaluator)

    def _eval_logged(self, row: dict) -> None:
        self.metrics.log_eval(row)
        self.alarms.eval_done(row)
        self.view.eval_done(row)

    async def at_start(self, steps_done: int, version: int) -> None:
        """The starting weights (or a resume point's) evaluated when due; the wait is the first step's."""
        if self.evaluator is not None:
            self._waits[0] += await self.evaluator.after_step(steps_done, version)

    async def before_sync(self, result: TrainResult) -> None:
        """A new version is about to load: a running evaluation ends on its own first. (The loop has
        its step's training result: what it waits from now on is in the next step's step_time.)"""
        if self.evaluator is not None and result.published is not None:
            self.view.set_status("waiting for the evaluation to end on its version")
            self._waits[1] += await self.evaluator.before_sync()

    async def after_step(self, steps_done: int, version: int) -> None:
        """The engines serve the weights after `steps_done` steps: evaluate them when due."""
        if self.evaluator is not None:
            self._waits[1] += await self.evaluator.after_step(steps_done, version)

    def take_wait(self) -> float:
        """eval_wait_time of the step whose row is being written: the seconds the loop waited on
        evaluation within its step_time (sync mode: whole evaluations; async: the syncs' waits)."""
        waited, self._waits = self._waits[0], [self._waits[1], 0.0]
        return waited

    async def finish(self) -> None:
        if self.evaluator is not None:
            self.view.set_status("evaluating the last step's weights")
            await self.evaluator.finish()

    async def cancel(self) -> None:
        if self.evaluator is not None:
            await self.evaluator.cancel()

    def check(self, row: dict) -> list[Alarm]:
        """The alarms the step's row sets off: alarm/* added to it, a line each in the live view."""
        fired = self.alarms.check(row)
        row.update(self.alarms.metrics(fired))
        for alarm in fired:
            self.view.alarm(alarm.line())
        return fired

    def stop_reason(self, fired: list[Alarm]) -> str | None:
        """Why the run stops after this step (run.stop_on_alarm), or None."""
        if not fired or not self.cfg.run.stop_on_alarm:
            return None
        return "; ".join(a.line() for a in fired) + " (run.stop_on_alarm = true)"
