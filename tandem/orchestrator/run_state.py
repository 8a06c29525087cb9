"""Where a run starts from: a fresh run directory, or the latest complete checkpoint.

A run directory that already holds a run is never written over implicitly: a fresh start there
is refused (RunDirInUse) unless the user asked for it with `--overwrite`, which removes tandem's
own outputs (and nothing else in the directory) first. `--resume` continues the run instead.

Resuming truncates everything the crashed run wrote after its checkpoint (metrics rows,
handoff files, newer weight versions, partial checkpoints), so the resumed run numbers
its steps exactly as an uninterrupted one would and never trains on a leftover batch.
Steps are numbered from 1 wherever they are shown or named (metrics rows, handoff files,
checkpoints): checkpoint N holds the state after step N, and metrics rows 1..N precede it.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

from tandem.weights import published_versions, version_dir
from tandem import checkpoint
from tandem.config import ConfigError, TandemConfig


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
    return json.loads(path.read_text())


RUN_OUTPUTS = ("config.json", "metrics.jsonl", "queue.jsonl", "endpoints.json", "data_report.json",
               "recoveries.json", "autoscale.jsonl", "rehearsal.md", "virtual.json", "failures.json",
               "rollouts", "trainer", "weights", checkpoint.CKPT_DIR, "logs", "tensorboard", "sandboxes", "sim", "views",
               "wandb", "inspect.html", "eval.jsonl", "eval", "eval_offline", "eval_offline.jsonl")
"""What a run writes into its directory: what `--overwrite` removes, and all it removes."""


class RunDirInUse(ConfigError):
    """A fresh run was pointed at a directory that holds a run, without --overwrite."""


def _holds_something(path: Path) -> bool:
    """A file, or a directory with a file somewhere under it (an empty one, e.g. a mount point
    made ready for the run, holds nothing to lose)."""
    if path.is_dir() and not path.is_symlink():
        return any(p.is_file() for p in path.rglob("*"))
    return path.exists() or path.is_symlink()


def describe_run(run_dir: Path) -> str | None:
    """What a run left in `run_dir` ("12 steps in metrics.jsonl, checkpoints step_000010"), or None
    when it holds nothing of a run."""
    found = [name for name in RUN_OUTPUTS if _holds_something(run_dir / name)]
    if not found:
        return None
    parts = []
    metrics = run_dir / "metrics.jsonl"
    if metrics.exists():
        rows = sum(1 for line in metrics.read_text(errors="replace").splitlines() if line.strip())
        parts.append(f"{rows} step(s) in metrics.jsonl")
    steps = checkpoint.complete_steps(run_dir)
    if steps:
        parts.append("checkpoints " + ", ".join(checkpoint.final_dir(run_dir, s).name for s in steps))
    versions = published_versions(run_dir) if (run_dir / "weights").exists() else []
    if versions:
        parts.append(f"weight versions {versions[0]}..{versions[-1]}")
    return "; ".join(parts) or ", ".join(found)


def refusal(run_dir: Path, overwrite: bool, replaceable: bool = False) -> str | None:
    """Why a fresh run may not start in `run_dir` (it holds a run, and neither `overwrite` nor
    `replaceable`, a rehearsal's own directory, allows replacing it), or None."""
    held = describe_run(run_dir) if run_dir.exists() else None
    if not held or overwrite or replaceable:
        return None
    return (f"run dir {run_dir} already holds a run ({held}); nothing was changed. Continue it with "
            f"`--resume {run_dir}`, pick another directory with `--run-dir DIR`, or pass `--overwrite` to delete "
            f"that run's outputs and start again there")


def next_start(run_dir: Path | None, command: str) -> str:
    """After a failure or a stop: what the run dir kept, and the command that goes on from there
    (`--resume` from its latest complete checkpoint, else a fresh start that may replace it)."""
    if run_dir is None:
        return "nothing was started"
    held = describe_run(run_dir) if run_dir.exists() else None
    if not held:
        return f"nothing was kept in {run_dir}; start again with `{command} ...` as before"
    if checkpoint.complete_steps(run_dir):
        return f"kept in {run_dir}: {held}. Continue it with `{command} --resume {run_dir}`"
    return (f"kept in {run_dir}: {held}, but no complete checkpoint to resume from: start again with the same "
            f"command and `--overwrite` (or `--run-dir DIR`)")


def claim(run_dir: Path, overwrite: bool, replaceable: bool = False) -> None:
    """Make `run_dir` ready for a fresh run: RunDirInUse (and nothing touched) where `refusal`
    says so; else remove the outputs of the run it holds, and nothing else that is there."""
    refused = refusal(run_dir, overwrite, replaceable)
    if refused:
        raise RunDirInUse(refused)
    for name in RUN_OUTPUTS if run_dir.exists() and describe_run(run_dir) else ():
        path = run_dir / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)


def fresh(run_dir: Path, cfg: TandemConfig, overwrite: bool = False, replaceable: bool = False) -> StartPoint:
    """A new run in `run_dir` (RunDirInUse if it holds one and `overwrite` is not given;
    `replaceable`: the directory is a rehearsal's own, which a new rehearsal replaces)."""
    claim(run_dir, overwrite, replaceable)
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    random.seed(cfg.run.seed)  # the orchestrator's Python-side choices (retry jitter, plug-ins) repeat
    return StartPoint()


def _truncate_metrics(path: Path, steps_done: int) -> None:
    """Keep the rows of steps 1..steps_done (a checkpoint after step N precedes rows N+1...)."""
    if not path.exists():
        return
    keep = [line for line in path.read_text().splitlines() if line.strip() and json.loads(line)["step"] <= steps_done]
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
            if int(f.stem.split("_")[1]) > step:  # files are named by step number, 1..
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
