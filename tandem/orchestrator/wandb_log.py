"""Weights & Biases ([logging.wandb]): every metrics.jsonl row under its group's prefix (rollout/,
train/, sync/, engine/, env/; tandem/metric_groups.py), the run's config, and a table of sample
trajectories per step.

wandb is optional: it is imported only when logging.wandb.mode is not "disabled", and preflight
names the pip command when it is enabled but missing. Offline mode writes the run under
<run_dir>/wandb with no network (`wandb sync` uploads it later). A resumed run continues the same
W&B run (its id is kept in <run_dir>/wandb/tandem_run_id); every row carries `step`, the axis
every metric is plotted against, so the steps a resume repeats are drawn at their own step.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

from tandem.config import TandemConfig
from tandem.metric_groups import grouped_name, numeric
from tandem.sample import Sample

RUN_ID_FILE = "tandem_run_id"
TABLE_KEY = "rollout/trajectories"
TABLE_COLUMNS = ["step", "sample", "group", "reward", "advantage", "end_reason", "weight_version", "staleness",
                 "turns", "model_tokens", "prompt", "response", "reward_info"]


def import_wandb():
    with warnings.catch_warnings():  # wandb's pydantic models warn on import (their code, not the user's)
        warnings.simplefilter("ignore")
        import wandb
    return wandb


def run_id(wandb_dir: Path, wandb) -> str:
    """The W&B run id of this run directory: made on the first start, kept for every resume."""
    path = wandb_dir / RUN_ID_FILE
    if path.exists():
        return path.read_text().strip()
    wandb_dir.mkdir(parents=True, exist_ok=True)
    new = wandb.util.generate_id()
    path.write_text(new)
    return new


def trajectory_rows(step: int, samples: list[Sample], limit: int, decode: Callable[[list[int]], str]) -> list[list]:
    """The first `limit` samples of step `step` (1-based) as rows of TABLE_COLUMNS."""
    rows = []
    for index, s in enumerate(samples[:limit]):
        env = s.metadata.get("env") or {}
        turns = sum(1 for i, m in enumerate(s.loss_mask) if m and (i == 0 or not s.loss_mask[i - 1]))
        rows.append([step, index, s.group_id, s.reward, s.advantage, env.get("end_reason") or s.finish_reason,
                     s.weight_version, step - 1 - s.weight_version, turns, s.num_model_tokens,
                     decode(s.prompt_ids), decode(s.response_ids), str(s.reward_info)])
    return rows


class WandbLog:
    """One W&B run for the run directory; log() after each step, close() at the end."""

    def __init__(self, cfg: TandemConfig, run_dir: Path, decode: Callable[[list[int]], str]):
        settings = cfg.logging.wandb
        self.wandb = import_wandb()
        self.decode, self.table_samples = decode, settings.table_samples
        wandb_dir = run_dir / "wandb"
        self.run = self.wandb.init(
            project=settings.project, entity=settings.entity or None, mode=settings.mode, dir=str(run_dir),
            # Offline runs are joined by `wandb sync`, which takes no resume flag (wandb warns on one).
            name=run_dir.name, id=run_id(wandb_dir, self.wandb), resume="allow" if settings.mode == "online" else None,
            config=cfg.model_dump(mode="json"),
            # tandem's own terminal stays tandem's: no console capture, no system sampling process.
            settings=self.wandb.Settings(console="off", silent=True, x_disable_stats=True, save_code=False))
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")

    def log(self, row: dict[str, Any], samples: list[Sample]) -> None:
        data: dict[str, Any] = {"step": row["step"]}
        data.update({grouped_name(k): v for k, v in row.items() if numeric(v) and k != "step"})
        if self.table_samples:
            rows = trajectory_rows(row["step"], samples, self.table_samples, self.decode)
            data[TABLE_KEY] = self.wandb.Table(columns=TABLE_COLUMNS, data=rows)
        self.run.log(data)

    def close(self) -> None:
        self.run.finish()
