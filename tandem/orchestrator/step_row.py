"""A step's metrics row (metrics.jsonl, TensorBoard, the live view): what each part of the run
reports about the step, in the order the row has always had (docs/metrics.md lists the keys)."""

from __future__ import annotations

from dataclasses import dataclass

from tandem.handoff import TrainResult
from tandem.orchestrator.failures import StepFailures
from tandem.orchestrator.metrics import rollout_metrics
from tandem.orchestrator.producer import StepBatch
from tandem.orchestrator.run import Run

TRAIN_KEYS = ("loss", "kl", "entropy", "clip_frac", "seq_clip_frac", "grad_norm", "logprob_mismatch", "train_time")


@dataclass
class StepTimes:
    """Seconds on the loop's clock. Steps are timed at the trainer's cadence, from one trained step
    to the next: step_time = trainer_wait_time (rollout tail + weight sync) + train time."""
    step_s: float
    trainer_wait_s: float
    reload_s: float


def step_row(run: Run, step: int, batch: StepBatch, failures: StepFailures, result: TrainResult,
             times: StepTimes) -> dict:
    """Rows number steps from 1, as the console, the handoff files and the checkpoints do: the row of
    step N follows checkpoint N-1 and carries weight version N once it is synced."""
    row = {"step": step + 1, "weight_version": run.producer.version, **rollout_metrics(batch.samples, step),
           **train_metrics(result), **timings(run, batch, result, times), **batch_counts(batch, failures),
           "requests_retried": run.ctx.engine.retried, **part_metrics(run, batch, result)}
    row["trainer_idle_ratio"] = row["trainer_wait_time"] / max(row["step_time"], 1e-9)
    return row


def train_metrics(result: TrainResult) -> dict:
    """The trainer's numbers for the step, and what routing replay reported (trainer.moe)."""
    routing = result.routing.row() if result.routing is not None else {}
    return {**{k: result.metrics.get(k, 0.0) for k in TRAIN_KEYS}, **routing}


def timings(run: Run, batch: StepBatch, result: TrainResult, times: StepTimes) -> dict:
    return {"step_time": times.step_s, "rollout_time": batch.rollout_time,
            "sync_time": times.reload_s + result.publish_time, "reload_time": times.reload_s,
            **result.sync_metrics(), "apply_time": run.fleet.apply_s,
            "trainer_wait_time": times.trainer_wait_s, "eval_wait_time": run.evaluation.take_wait(),
            "gen_tokens_per_s": sum(s.num_model_tokens for s in batch.samples) / max(batch.rollout_time, 1e-9)}


def batch_counts(batch: StepBatch, failures: StepFailures) -> dict:
    return {"reward_errors": failures.reward_errors, "rollout_errors": failures.rollout_errors,
            "dropped_stale": batch.dropped_stale, "recycled_groups": batch.recycled,
            "oversample_discarded": batch.discarded, "longest_group_s": batch.longest_group_s}


def part_metrics(run: Run, batch: StepBatch, result: TrainResult) -> dict:
    """What the engines, the fleet, the producer, the CPU split, colocation and the plug-in report."""
    colocated = run.colocation.metrics(result.handover) if run.colocation is not None else {}
    return {**run.ctx.engine.load.take(), **run.fleet.metrics(), **batch.stats, **run.cpu.metrics(), **colocated,
            **step_plugin_metrics(run.producer.rollout_fn, batch.samples)}


def step_plugin_metrics(rollout_fn, samples) -> dict:
    """A rollout plug-in may report its own per-step metrics (e.g. the coding agent's pass@1)."""
    fn = getattr(rollout_fn, "step_metrics", None)
    return dict(fn(samples)) if fn else {}
