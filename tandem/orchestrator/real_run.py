"""The real run's edges: engines and a trainer in child processes under a supervisor, reached over
HTTP and through files; and `orchestrate`, which composes the run around them and drives it."""

from __future__ import annotations

import asyncio
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tandem.auth import bearer_headers
from tandem.autoscale.providers import CommandProvider, NodeProvider
from tandem.config import TandemConfig
from tandem.model_source import load_tokenizer
from tandem.orchestrator import run_state
from tandem.orchestrator.cluster import Cluster, engine_command
from tandem.orchestrator.colocation import Colocation
from tandem.orchestrator.cpu_share import FIXED, CpuShare
from tandem.orchestrator.external import ExternalFleet
from tandem.orchestrator.fleet import Fleet
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks
from tandem.orchestrator.loop import drive
from tandem.orchestrator.metrics import QueueMonitor
from tandem.orchestrator.run import Edges, Run, compose
from tandem.orchestrator.trainer_link import FileTrainerLink
from tandem.rollout import EngineClient
from tandem.rollout.direct import router_workers
from tandem.supervisor import Supervisor


async def real_edges(cfg: TandemConfig, run_dir: Path, sup: Supervisor, cluster: Cluster, model_path: str,
                     start: run_state.StartPoint, hooks: RunHooks = NO_HOOKS) -> Edges:
    """The engines behind sglang-router and the trainer child of `cluster`; the engines are brought to
    the run's starting weights first (external engines, or a resumed run's checkpoint)."""
    headers = bearer_headers(cfg.engine.api_key_env)  # the engines' API key, if they want one
    client = EngineClient(cluster.router_url, cfg.rollout.client.concurrency, cfg.rollout.client.request_timeout_s,
                          headers=headers)
    if cfg.trainer.moe.wants_routing:  # the router drops return_routed_experts: straight to its engines
        client.ask_routed_experts(router_workers(cluster.router_url, headers))
    # Sandboxes and graders block; size their pool to the rollouts in flight, not asyncio's default.
    executor = ThreadPoolExecutor(max_workers=cfg.rollout.client.concurrency + 16, thread_name_prefix="rollout")
    tokenizer = load_tokenizer(model_path, cfg.model.trust_remote_code)
    external = cfg.engine.backend == "external"
    fleet = (ExternalFleet if external else Fleet)(cfg, sup, cluster.engines, cluster.router_url, hooks)
    if cluster.start_weights is not None:  # external engines converge on the run's starting weights
        await fleet.sync(client, cluster.start_weights[0], cluster.start_weights[1], "drain",
                         cfg.sync.reload_timeout_s)
    elif start.checkpoint_dir is not None:  # engines come back on the checkpoint's weights
        await fleet.sync(client, str(start.checkpoint_dir / "hf"), start.weight_version, "drain",
                         cfg.sync.reload_timeout_s)
    queues = QueueMonitor(cluster.engines, run_dir / "queue.jsonl", cfg.logging.queue_sample_interval_s,
                          headers=headers)
    cpu = CpuShare(cluster.placement.cores, cfg.engine.count, cfg.effective_staleness > 0, fleet.set_cpu_threads,
                   adapt=not cfg.run.reproducible) if cluster.placement.phase_split else FIXED
    colocation = Colocation(fleet, client, cfg.sync.reload_timeout_s, cluster.placement.engines_on_gpu, hooks) \
        if cfg.colocated else None

    async def watch_children(run: Run) -> None:
        await watch(sup, run, cfg.faults.stall_warning_s)

    async def queue_monitor(run: Run) -> None:
        await queues.run()

    async def engine_doctor(run: Run) -> None:
        await fleet.run_doctor()

    # external engines are never restarted, only re-admitted
    doctor = [engine_doctor] if cfg.faults.max_engine_restarts > 0 or external else []
    return Edges(tokenizer=tokenizer, client=client, executor=executor, fleet=fleet,
                 trainer=FileTrainerLink(run_dir, cfg, cluster), queues=queues, cpu=cpu, colocation=colocation,
                 autoscale_provider=lambda: autoscale_provider(cfg, sup, cluster, run_dir, model_path),
                 watchers=[watch_children, queue_monitor, *doctor])


def autoscale_provider(cfg: TandemConfig, sup: Supervisor, cluster: Cluster, run_dir: Path,
                       model_path: str) -> CommandProvider | NodeProvider:
    """[engine.autoscale]'s provider: the user's command, or engines started on this node's spare GPUs."""
    scale = cfg.engine.autoscale
    if scale.provider == "command":
        return CommandProvider(cfg, sup)
    spare = cluster.placement.engine_gpus[cfg.engine.count:scale.max]
    return NodeProvider(cfg, sup, cluster.placement,
                        lambda name, port: engine_command(cfg, name, port, run_dir, model_path), spare)


async def watch(sup: Supervisor, run: Run, stall_s: float, interval_s: float = 0.5) -> None:
    """Stop on a dead critical child; report (never silently sit in) a stall."""
    last_rows, last_progress, warned = 0, time.monotonic(), False
    while True:
        sup.check()  # raises ChildFailed with the dead child's log tail
        if len(run.metrics.rows) != last_rows:
            last_rows, last_progress, warned = len(run.metrics.rows), time.monotonic(), False
        elif not warned and time.monotonic() - last_progress > stall_s:
            warned = True
            print(f"tandem: watchdog: no step finished for {time.monotonic() - last_progress:.0f}s; "
                  f"now {run.view.status}", file=sys.stderr, flush=True)
        await asyncio.sleep(interval_s)


async def orchestrate(cfg: TandemConfig, run_dir: Path, sup: Supervisor, cluster: Cluster, model_path: str,
                      inputs: tuple, start: run_state.StartPoint, hooks: RunHooks = NO_HOOKS) -> None:
    edges = await real_edges(cfg, run_dir, sup, cluster, model_path, start, hooks)
    await drive(compose(cfg, run_dir, start, inputs, edges, hooks))
