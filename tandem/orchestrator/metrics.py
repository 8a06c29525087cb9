"""Per-step metrics: metrics.jsonl (one object per step), TensorBoard, and the engine queue monitor."""

from __future__ import annotations

import asyncio
import json
import statistics
import time
from collections import deque
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from tandem.metric_groups import grouped_name, numeric
from tandem.orchestrator.wandb_log import WandbLog
from tandem.sample import Sample
from tandem.engine_api import read_load

REQUIRED_KEYS = (
    "step", "weight_version", "samples", "reward_mean", "reward_std", "response_len_mean",
    "step_time", "rollout_time", "train_time", "sync_time", "trainer_wait_time", "trainer_idle_ratio",
    "gen_tokens_per_s", "staleness_mean", "staleness_max", "dropped_stale", "logprob_mismatch",
    "loss", "kl", "entropy", "clip_frac", "grad_norm",
)


def rollout_metrics(samples: list[Sample], step: int) -> dict[str, float]:
    rewards = [s.reward for s in samples]
    staleness = [step - s.weight_version for s in samples]
    lens = [s.num_model_tokens for s in samples]
    groups: dict[int, list[float]] = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s.reward)
    return {
        "samples": len(samples),
        "reward_mean": statistics.fmean(rewards),
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
        "response_len_mean": statistics.fmean(lens),
        "staleness_mean": statistics.fmean(staleness),
        "staleness_max": max(staleness),
        "truncated_ratio": sum(s.finish_reason == "length" for s in samples) / len(samples),
        "zero_std_groups": sum(1 for g in groups.values() if len(set(g)) == 1),
    }


class MetricsLog:
    """Appends one JSON object per step; mirrors scalars to TensorBoard and Weights & Biases when
    enabled, each under its group's prefix (train/loss, rollout/reward_mean: tandem/metric_groups.py)."""

    def __init__(self, run_dir: Path, tensorboard: bool, steps_done: int = 0, wandb: WandbLog | None = None):
        """`steps_done`: a resumed run's checkpoint step; TensorBoard drops what the interrupted run
        logged after it (purge_step), so the resumed curves do not overlap the abandoned ones."""
        self.path = run_dir / "metrics.jsonl"
        self.rows: list[dict[str, Any]] = []
        self._wandb = wandb
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(str(run_dir / "tensorboard"), purge_step=steps_done + 1 if steps_done else None)

    def log(self, row: dict[str, Any], samples: Sequence[Sample] = ()) -> None:
        """`samples`: the step's trained samples (W&B's trajectory table)."""
        missing = [k for k in REQUIRED_KEYS if k not in row]
        if missing:
            raise KeyError(f"metrics row for step {row.get('step')} lacks {missing}")
        self.rows.append(row)
        with open(self.path, "a") as f:
            f.write(json.dumps(row) + "\n")
        if self._tb is not None:
            for key, value in row.items():
                if numeric(value) and key != "step":
                    self._tb.add_scalar(grouped_name(key), value, row["step"])
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.log(row, list(samples))

    def log_eval(self, row: dict[str, Any]) -> None:
        """One evaluation's row (tandem.eval): eval.jsonl, and its eval/* figures and eval_time to
        TensorBoard and W&B at the row's step (its other keys, e.g. weight_version, are the step row's)."""
        with open(self.path.with_name("eval.jsonl"), "a") as f:
            f.write(json.dumps(row) + "\n")
        scalars = {grouped_name(k): v for k, v in row.items()
                   if numeric(v) and (k.startswith("eval/") or k == "eval_time")}
        if self._tb is not None:
            for key, value in scalars.items():
                self._tb.add_scalar(key, value, row["step"])
            self._tb.flush()
        if self._wandb is not None:
            self._wandb.run.log({"step": row["step"], **scalars})

    def close(self) -> None:
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.close()


class QueueMonitor:
    """Samples every engine's queue depth into queue.jsonl and keeps a window for sparklines."""

    def __init__(self, engines: dict[str, str], path: Path, interval_s: float, window: int = 60,
                 headers: dict[str, str] | None = None):
        self.engines, self.path, self.interval_s, self.headers = engines, path, interval_s, headers or {}
        self.window = window
        self.history: dict[str, deque] = {name: deque(maxlen=window) for name in engines}
        self.peak_waiting: dict[str, int] = {name: 0 for name in engines}
        """Per engine name; an engine that joins later (autoscaling) gets its entries when first sampled."""
        self._t0 = time.monotonic()

    async def run(self) -> None:
        async with httpx.AsyncClient(timeout=max(1.0, self.interval_s * 4), headers=self.headers) as client:
            with open(self.path, "a") as f:
                while True:
                    await self._sample(client, f)
                    await asyncio.sleep(self.interval_s)

    async def _sample(self, client: httpx.AsyncClient, f) -> None:
        async def one(name: str, url: str):
            try:
                return name, await read_load(client, url, timeout_s=max(1.0, self.interval_s * 4))
            except (httpx.HTTPError, ValueError):
                return name, None

        now = time.time()
        for name, load in await asyncio.gather(*(one(n, u) for n, u in list(self.engines.items()))):
            if load is None:
                continue  # an engine being restarted has no queue to report
            waiting, running = load.waiting, load.running
            self.history.setdefault(name, deque(maxlen=self.window)).append(waiting + running)
            self.peak_waiting[name] = max(self.peak_waiting.get(name, 0), waiting)
            f.write(json.dumps({"t": now, "engine": name, "waiting": waiting, "running": running}) + "\n")
        f.flush()
