"""Failed rewards and rollouts: said once, counted per step, and bounded.

A reward plug-in that raises or times out scores its sample 0 with the reason (one broken
sample must not end a run), and a rollout that raises drops its group (tandem.orchestrator.
producer). Left alone, a reward that always fails would train on zeros for the whole run, so:

- the first failure of each kind is printed with its traceback, once, and kept in failures.json;
- every step counts them (`reward_errors`, `rollout_errors` in metrics.jsonl and the live view);
- the run stops, exit 1, with the cause named, when every sample of a step failed, or when more
  than `run.max_failed_fraction` of the samples failed over the last `run.failed_window_steps`
  steps. It stops before training on the failing step, after a checkpoint of the steps done
  (the failing step's prompts first in its queue), so `--resume` continues once the cause is fixed.
"""

from __future__ import annotations

import json
import sys
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from tandem.orchestrator.producer import FailedGroup, StepBatch
from tandem.rollout.scoring import reward_failed


class RunStopped(RuntimeError):
    """The run stopped itself (too many failures); the message names the cause and how to resume."""


@dataclass
class StepFailures:
    reward_errors: int
    rollout_errors: int
    """Samples lost with the groups whose rollout raised."""
    samples: int
    """Samples the step would have had: trained ones plus those lost to rollout errors."""

    @property
    def failed(self) -> int:
        return self.reward_errors + self.rollout_errors


class FailureGuard:
    """Per-run bookkeeping of failures: the first one said loudly, the bound checked each step."""

    def __init__(self, run_dir: Path, max_fraction: float, window_steps: int, reward_spec: str):
        self.path = run_dir / "failures.json"
        self.max_fraction, self.window = max_fraction, window_steps
        self.reward_spec = reward_spec
        self.history: deque[StepFailures] = deque(maxlen=window_steps)
        self.first: dict[str, dict] = {}

    def observe(self, step_number: int, batch: StepBatch) -> StepFailures:
        """Count the step's failures (saying the first of each kind) and remember them for the window."""
        failed_samples = [s for s in batch.samples if reward_failed(s)]
        counts = StepFailures(len(failed_samples), sum(g.samples for g in batch.failed_groups),
                              len(batch.samples) + sum(g.samples for g in batch.failed_groups))
        if failed_samples:
            info = failed_samples[0].reward_info
            self._first("reward", step_number, f"the reward ({self.reward_spec})",
                        str(info["reason"]).removeprefix("error: "),
                        str(info.get("traceback", "")))
        if batch.failed_groups:
            self.first_rollout_failure(step_number, batch.failed_groups)
        self.history.append(counts)
        return counts

    def first_rollout_failure(self, step_number: int, failed: list[FailedGroup]) -> None:
        self._first("rollout", step_number, "a rollout", failed[0].error, failed[0].traceback)

    def stop_reason(self, step_number: int, counts: StepFailures) -> str | None:
        """Why the run must stop before training this step, or None."""
        if counts.samples and counts.failed == counts.samples:
            return f"every sample of step {step_number} failed ({self._causes(counts)})"
        if len(self.history) < self.window:
            return None
        failed, total = sum(c.failed for c in self.history), sum(c.samples for c in self.history)
        if total and failed / total > self.max_fraction:
            return (f"{failed} of {total} samples failed over the last {self.window} steps ({failed / total:.0%} > "
                    f"run.max_failed_fraction = {self.max_fraction:g}; {self._causes(counts)})")
        return None

    def _causes(self, counts: StepFailures) -> str:
        parts = [f"{kind} failures, first: {first['error']}" for kind, first in self.first.items()]
        return "; ".join(parts) or f"{counts.failed} failed"

    def _first(self, kind: str, step_number: int, what: str, error: str, trace: str) -> None:
        if kind in self.first:
            return
        self.first[kind] = {"step": step_number, "error": error, "traceback": trace}
        print(f"tandem: {what} failed at step {step_number}: {error}\n{trace.rstrip()}\n"
              f"tandem: further {kind} failures are counted per step ({kind}_errors in metrics.jsonl); the run stops "
              f"if they pass run.max_failed_fraction", file=sys.stderr, flush=True)
        self.save()

    def save(self, stop_reason: str | None = None) -> None:
        payload = {"first": self.first, **({"stopped": stop_reason} if stop_reason else {})}
        self.path.write_text(json.dumps(payload, indent=1))
