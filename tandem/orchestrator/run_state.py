"""Where a run starts from: a fresh run directory, or the latest complete checkpoint.

Resuming truncates everything the crashed run wrote after its checkpoint (metrics rows,
handoff files, newer weight versions, partial checkpoints), so the resumed run numbers
its steps exactly as an uninterrupted one would and never trains on a leftover batch.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from tandem.weights import published_versions, version_dir
from tandem import checkpoint
from tandem.config import ConfigError, TandemConfig, without_removed_keys


@dataclass
class StartPoint:
    step: int = 0
    weight_version: int = 0
    cursor: dict | None = None
    checkpoint_dir: Path | None = None
    """The checkpoint resumed from; its hf/ holds the weights engines load first."""
    in_flight_rows: tuple[int, ...] = ()
    """Prompts admitted but not trained when the checkpoint was taken: regenerated first."""


def resume_base_tree(run_dir: str) -> dict:
    """The config a run was started with, as the base for `--resume` (CLI overrides apply on top)."""
    path = Path(run_dir) / "config.json"
    if not path.exists():
        raise ConfigError(f"--resume {run_dir}: no config.json there (is it a tandem run directory?)")
    return without_removed_keys(json.loads(path.read_text()))  # keys an older tandem still wrote


def fresh(run_dir: Path, cfg: TandemConfig) -> StartPoint:
    run_dir.mkdir(parents=True, exist_ok=True)
    for name in ("metrics.jsonl", "queue.jsonl", "endpoints.json"):
        (run_dir / name).unlink(missing_ok=True)
    for sub in ("rollouts", "trainer", "weights", checkpoint.CKPT_DIR):
        shutil.rmtree(run_dir / sub, ignore_errors=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    random.seed(cfg.run.seed)  # the orchestrator's Python-side choices (retry jitter, plug-ins) repeat
    return StartPoint()


def _truncate_metrics(path: Path, before_step: int) -> None:
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] < before_step]
    path.write_text("".join(line + "\n" for line in keep))


def resume(run_dir: Path, cfg: TandemConfig) -> StartPoint:
    checkpoint.discard_partials(run_dir)
    latest = checkpoint.latest(run_dir)
    if latest is None:
        raise ConfigError(f"--resume {run_dir}: no complete checkpoint under {checkpoint.checkpoints_root(run_dir)}")
    state = json.loads((latest / "orchestrator.json").read_text())
    step, version = int(state["step"]), int(state["weight_version"])
    if step >= cfg.run.steps:
        raise ConfigError(f"--resume {run_dir}: the checkpoint is at step {step} and run.steps is {cfg.run.steps}; "
                          f"pass --steps N with N > {step} to train further")
    _truncate_metrics(run_dir / "metrics.jsonl", step)
    for sub in ("rollouts", "trainer"):
        for f in (run_dir / sub).glob("step_*.json") if (run_dir / sub).exists() else []:
            if int(f.stem.split("_")[1]) >= step:
                f.unlink()
    (run_dir / "trainer" / "ready.json").unlink(missing_ok=True)
    for v in published_versions(run_dir):
        if v > version:
            shutil.rmtree(version_dir(run_dir, v), ignore_errors=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    if "python_rng" in state:  # continue the Python-side random stream where the checkpoint left it
        checkpoint.restore_python_rng(state["python_rng"])
    return StartPoint(step, version, state.get("cursor"), latest, tuple(state.get("in_flight_rows", ())))


def orchestrator_state(step: int, weight_version: int, cursor: dict, extra: dict | None = None) -> dict:
    return {"step": step, "weight_version": weight_version, "cursor": cursor,
            "python_rng": checkpoint.python_rng_state(),
            "in_flight_policy": "groups admitted and not trained are discarded; their prompts (in_flight_rows) "
                                "are regenerated first on resume",
            **(extra or {})}
