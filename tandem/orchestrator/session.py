"""The launcher's run phase: build or find the model, start the engines, the router and the trainer,
run the loop to the end, say how it went.

Its own module, imported by the launcher through tandem.registry only once the checks passed: the
loop, the fleet and the model source pull in torch and friends (seconds, more under load), and a
refused or misconfigured run says so before paying for them (tests/test_first_hour.py).
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from tandem.config import TandemConfig
from tandem.model_source import resolve_model_path
from tandem.orchestrator import run_state
from tandem.orchestrator.cluster import start_cluster
from tandem.orchestrator.hooks import RunHooks
from tandem.orchestrator.live_view import closing_summary
from tandem.orchestrator.real_run import orchestrate
from tandem.supervisor import Supervisor


def run(cfg: TandemConfig, sup: Supervisor, start: run_state.StartPoint, inputs: tuple, hooks: RunHooks,
        command: str = "python train.py") -> None:
    """Start the engines, the router and the trainer under `sup`, then run the loop to the end (`command`:
    how the user started it, for the commands the closing summary suggests)."""
    dataset = inputs[0]
    started = time.monotonic()
    run_dir = Path(cfg.run.run_dir)
    (run_dir / "data_report.json").write_text(json.dumps(
        {"rows": len(dataset.rows), "skipped": dataset.skipped, "examples": dataset.skipped_examples}))
    model_path = resolve_model_path(cfg)
    print(f"tandem: run dir {run_dir}; {cfg.engine.count} {cfg.engine.backend} engine(s), "
          f"{cfg.trainer.backend} trainer, mode {cfg.run.mode} (staleness {cfg.effective_staleness})"
          + (f"; resuming at step {start.step + 1} from {start.checkpoint_dir}" if start.checkpoint_dir else ""),
          flush=True)
    trainer_args = (["--start-step", str(start.step), "--resume-from", str(start.checkpoint_dir)]
                    if start.checkpoint_dir else [])
    cluster = start_cluster(cfg, sup, run_dir, model_path, trainer_args)
    print(f"tandem: router {cluster.router_url}; endpoints in {run_dir / 'endpoints.json'}", flush=True)
    asyncio.run(orchestrate(cfg, run_dir, sup, cluster, model_path, inputs, start, hooks))
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    print("\n".join(closing_summary(run_dir, rows, time.monotonic() - started, command,
                                      cfg.logging.wandb.mode)), flush=True)
