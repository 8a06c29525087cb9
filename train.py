"""tandem's launcher and training loop.

    python train.py                          # the default CPU job (tiny model, echo task)
    python train.py --engines 3 --mode async # an 8-GPU node: trainer on 0-3, engines on 4-6
    python train.py --help                   # every config key

The launcher validates the config and data, starts the engines, sglang-router and the
trainer as supervised children, then runs the loop below. Sync and async are the same
loop: the producer may run `staleness` weight versions ahead of the trainer (0 = sync).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent
sys.path.insert(0, str(REPO))

from tandem.rollout import (DataError, EngineClient, PluginError, PromptCursor, RolloutContext,  # noqa: E402
                     load_dataset_rows, load_plugin, sampling_params_from_config)
from tandem.weights import PublishError, SyncError  # noqa: E402
from tandem import checkpoint  # noqa: E402
from tandem.orchestrator import run_state  # noqa: E402
from tandem.orchestrator.cluster import Cluster, start_cluster  # noqa: E402
from tandem.orchestrator.fleet import EngineCrashLoop, Fleet  # noqa: E402
from tandem.config import ConfigError, TandemConfig, load_config  # noqa: E402
from tandem.handoff import HandoffTimeout, wait_train_result, write_batch  # noqa: E402
from tandem.orchestrator.live_view import LiveView  # noqa: E402
from tandem.orchestrator.metrics import MetricsLog, QueueMonitor, rollout_metrics  # noqa: E402
from tandem.model_source import load_tokenizer, resolve_model_path  # noqa: E402
from tandem.orchestrator.producer import RolloutProducer  # noqa: E402
from tandem.orchestrator.supervisor import ChildFailed, Supervisor  # noqa: E402

TRAIN_KEYS = ("loss", "kl", "entropy", "clip_frac", "grad_norm", "logprob_mismatch", "train_time")


async def run_loop(cfg: TandemConfig, run_dir: Path, producer: RolloutProducer, ctx: RolloutContext,
                   cluster: Cluster, fleet: Fleet, metrics: MetricsLog, view: LiveView, start_step: int) -> None:
    """The whole RL loop. Rollout for step k+staleness overlaps training on step k."""
    from tandem.losses import assign_advantages  # torch: imported only once a run starts

    # Steps are timed at the trainer's cadence: from one trained step to the next, so
    # step_time = trainer_wait_time (rollout tail + weight sync) + train time.
    last_result = time.monotonic()
    for step in range(start_step, cfg.run.steps):
        view.set_status(f"step {step}: rolling out (waiting on engines)")
        batch = await producer.take(step)                                  # 1. rollout
        assign_advantages(batch.samples, cfg.trainer.loss.use_std_norm)
        await asyncio.to_thread(write_batch, run_dir, step, batch.samples)  # off the loop: rollouts keep flowing
        batch_written = time.monotonic()
        view.set_status(f"step {step}: training (waiting on trainer)")
        result = await wait_trainer(run_dir, step, cfg, cluster)                     # 2. train
        result_at = time.monotonic()
        reload_s = 0.0
        if result.get("weight_version") is not None:                        # 3. sync
            view.set_status(f"step {step}: syncing weights v{result['weight_version']} (waiting on engines)")
            reload_s = await fleet.sync(ctx.engine, result["weights_path"], result["weight_version"],
                                        cfg.rollout.partial_rollout, cfg.sync.reload_timeout_s)
            await producer.set_version(result["weight_version"])
        row = {"step": step, "weight_version": producer.version, **rollout_metrics(batch.samples, step),
               **{k: result.get(k, 0.0) for k in TRAIN_KEYS},
               "step_time": result_at - last_result, "rollout_time": batch.rollout_time,
               "sync_time": reload_s + result.get("publish_time", 0.0), "reload_time": reload_s,
               "trainer_wait_time": batch_written - last_result,
               "gen_tokens_per_s": sum(s.num_model_tokens for s in batch.samples) / max(batch.rollout_time, 1e-9),
               "dropped_stale": batch.dropped_stale, "recycled_groups": batch.recycled,
               "oversample_discarded": batch.discarded, "longest_group_s": batch.longest_group_s,
               "requests_retried": ctx.engine.retried, **fleet.metrics(),
               **step_plugin_metrics(producer.rollout_fn, batch.samples)}
        row["trainer_idle_ratio"] = row["trainer_wait_time"] / max(row["step_time"], 1e-9)
        metrics.log(row)
        view.step_done(row)
        if result.get("checkpoint_tmp"):  # checkpoint (atomic), after the row: checkpoint N => rows 0..N-1
            view.set_status(f"step {step}: checkpointing")
            finalize_checkpoint(run_dir, step + 1, producer, cfg)
        last_result = result_at


async def wait_trainer(run_dir: Path, step: int, cfg: TandemConfig, cluster: Cluster) -> dict:
    """The trainer's answer for `step`, polled in a thread that stops as soon as this task is
    cancelled (Ctrl-C: asyncio.run joins its threads before returning, so a thread that kept
    polling would hold the launcher, and every child, for as long as the step takes). A dead
    trainer is reported with its exit and log tail."""
    cancelled = threading.Event()
    try:
        return await asyncio.to_thread(wait_train_result, run_dir, step, cfg.sync.trainer_timeout_s,
                                       lambda: cluster.trainer.alive and not cancelled.is_set())
    except RuntimeError:
        if not cluster.trainer.alive:
            raise ChildFailed(cluster.trainer.describe_exit()) from None
        raise
    finally:
        cancelled.set()


def finalize_checkpoint(run_dir: Path, next_step: int, producer: RolloutProducer, cfg: TandemConfig) -> None:
    state = run_state.orchestrator_state(next_step, next_step, producer.cursor_state_for(next_step))
    checkpoint.finalize(run_dir, next_step, state, cfg.checkpoint.keep_last)


def step_plugin_metrics(rollout_fn, samples) -> dict:
    """A rollout plug-in may report its own per-step metrics (e.g. the coding agent's pass@1)."""
    fn = getattr(rollout_fn, "step_metrics", None)
    return dict(fn(samples)) if fn else {}


async def watch_children(sup: Supervisor, metrics: MetricsLog, view: LiveView, stall_s: float,
                         interval_s: float = 0.5) -> None:
    """Stop on a dead critical child; report (never silently sit in) a stall."""
    last_rows, last_progress, warned = 0, time.monotonic(), False
    while True:
        sup.check()  # raises ChildFailed with the dead child's log tail
        if len(metrics.rows) != last_rows:
            last_rows, last_progress, warned = len(metrics.rows), time.monotonic(), False
        elif not warned and time.monotonic() - last_progress > stall_s:
            warned = True
            print(f"tandem: watchdog: no step finished for {time.monotonic() - last_progress:.0f}s; "
                  f"now {view.status}", file=sys.stderr, flush=True)
        await asyncio.sleep(interval_s)


async def orchestrate(cfg: TandemConfig, run_dir: Path, sup: Supervisor, cluster: Cluster, model_path: str,
                      dataset, rollout_fn, reward_fn, start: run_state.StartPoint) -> None:
    client = EngineClient(cluster.router_url, cfg.rollout.concurrency, cfg.rollout.request_timeout_s)
    # Sandboxes and graders block; size their pool to the rollouts in flight, not asyncio's default.
    executor = ThreadPoolExecutor(max_workers=cfg.rollout.concurrency + 16, thread_name_prefix="rollout")
    ctx = RolloutContext(cfg, load_tokenizer(model_path, cfg.model.trust_remote_code), client, executor, reward_fn,
                         sampling_params_from_config(cfg))
    fleet = Fleet(cfg, sup, cluster.engines, cluster.router_url)
    if start.checkpoint_dir is not None:  # engines come back on the checkpoint's weights
        await fleet.sync(client, str(start.checkpoint_dir / "hf"), start.weight_version, "drain",
                         cfg.sync.reload_timeout_s)
    cursor = PromptCursor(len(dataset.rows), cfg.run.seed, cfg.rollout.shuffle,
                          **({k: start.cursor[k] for k in ("epoch", "position")} if start.cursor else {}))
    producer = RolloutProducer(ctx, dataset.rows, cursor, rollout_fn, start_step=start.step,
                               total_steps=cfg.run.steps, staleness=cfg.effective_staleness,
                               engine_version=start.weight_version)
    monitor = QueueMonitor(cluster.engines, run_dir / "queue.jsonl", cfg.logging.queue_sample_interval_s)
    metrics = MetricsLog(run_dir, cfg.logging.tensorboard)
    view = LiveView(cfg.run.steps, start.step, monitor, cfg.logging.live)
    producer.start()
    tasks = [asyncio.create_task(run_loop(cfg, run_dir, producer, ctx, cluster, fleet, metrics, view, start.step)),
             asyncio.create_task(watch_children(sup, metrics, view, cfg.faults.stall_warning_s)),
             asyncio.create_task(monitor.run(), name="queue-monitor")]
    if cfg.faults.max_engine_restarts > 0:
        tasks.append(asyncio.create_task(fleet.run_doctor(), name="engine-doctor"))
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise whatever stopped us
    finally:
        for task in tasks:
            task.cancel()
        await producer.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        view.close()
        metrics.close()
        await client.close()
        await fleet.close()
        executor.shutdown(wait=False, cancel_futures=True)
        if fleet.recoveries:
            (run_dir / "recoveries.json").write_text(json.dumps([r.__dict__ for r in fleet.recoveries], indent=1))


def absolutize_paths(cfg: TandemConfig) -> None:
    """Children may run elsewhere (torchrun, other cwd): hand them absolute paths.

    A relative path means the caller's directory; shipped defaults (data/, profiles/)
    fall back to the repository when they are not found there.
    """
    def resolve(path: str) -> str:
        p = Path(path).expanduser()
        if p.is_absolute():
            return str(p)
        here = Path.cwd() / p
        return str(here if here.exists() or not (REPO / p).exists() else REPO / p)

    cfg.run.run_dir = str(Path(cfg.run.run_dir).expanduser().resolve())
    cfg.run.cache_dir = str(Path(cfg.run.cache_dir).expanduser().resolve())
    cfg.rollout.data_path = resolve(cfg.rollout.data_path)
    cfg.engine.sim.profile = resolve(cfg.engine.sim.profile)
    cfg.engine.sim.workload = resolve(cfg.engine.sim.workload)
    for section, key in (("agent", "prompt_file"), ("sandbox", "root_dir"), ("sandbox", "python")):
        value = getattr(getattr(cfg, section), key)
        if value and "/" in value:  # a bare name (e.g. "python3") is looked up on PATH
            setattr(getattr(cfg, section), key, resolve(value))
    if cfg.model.path != "tiny" and (Path.cwd() / cfg.model.path).exists():
        cfg.model.path = str((Path.cwd() / cfg.model.path).resolve())


class Stop(KeyboardInterrupt):
    """SIGTERM: stop like Ctrl-C, and exit 128 + SIGTERM as a scheduler (k8s, SLURM) expects."""


def _raise_stop(signum, frame):
    raise Stop(f"signal {signum}")


def split_resume(argv: list[str]) -> tuple[str | None, list[str]]:
    """`--resume R` continues the run in R from its latest complete checkpoint."""
    rest, resume = [], None
    i = 0
    while i < len(argv):
        if argv[i] == "--resume" and i + 1 < len(argv):
            resume, i = argv[i + 1], i + 2
        elif argv[i].startswith("--resume="):
            resume, i = argv[i].split("=", 1)[1], i + 1
        else:
            rest, i = rest + [argv[i]], i + 1
    return resume, rest


def main(argv: list[str] | None = None) -> int:
    # SIGINT keeps the disposition the launcher inherited: started under nohup or as a script's
    # background job, the user asked for it to be ignored.
    signal.signal(signal.SIGTERM, _raise_stop)
    sup = None
    try:
        resume_dir, argv = split_resume(list(sys.argv[1:] if argv is None else argv))
        if resume_dir:
            cfg = load_config(argv, base_tree=run_state.resume_base_tree(resume_dir))
            cfg.run.run_dir = resume_dir
        else:
            cfg = load_config(argv)
        absolutize_paths(cfg)
        # Fail on bad data or plug-ins before any child is started.
        dataset = load_dataset_rows(cfg.rollout.data_path, cfg.rollout.prompt_key)
        if dataset.skipped:
            print(f"warning: skipped {dataset.skipped} malformed row(s) of {cfg.rollout.data_path}: "
                  f"{'; '.join(dataset.skipped_examples[:3])}", file=sys.stderr)
        rollout_fn = load_plugin(cfg.rollout.function, "rollout.function")
        reward_fn = load_plugin(cfg.rollout.reward, "rollout.reward")
        run_dir = Path(cfg.run.run_dir)
        start = run_state.resume(run_dir, cfg) if resume_dir else run_state.fresh(run_dir, cfg)
        (run_dir / "data_report.json").write_text(json.dumps(
            {"rows": len(dataset.rows), "skipped": dataset.skipped, "examples": dataset.skipped_examples}))
        model_path = resolve_model_path(cfg)
        sup = Supervisor(run_dir, REPO)
        print(f"tandem: run dir {run_dir}; {cfg.engine.count} {cfg.engine.backend} engine(s), "
              f"{cfg.trainer.backend} trainer, mode {cfg.run.mode} (staleness {cfg.effective_staleness})"
              + (f"; resuming at step {start.step} from {start.checkpoint_dir}" if start.checkpoint_dir else ""),
              flush=True)
        trainer_args = (["--start-step", str(start.step), "--resume-from", str(start.checkpoint_dir)]
                        if start.checkpoint_dir else [])
        cluster = start_cluster(cfg, sup, run_dir, run_dir / "config.json", model_path, trainer_args)
        print(f"tandem: router {cluster.router_url}; endpoints in {run_dir / 'endpoints.json'}", flush=True)
        asyncio.run(orchestrate(cfg, run_dir, sup, cluster, model_path, dataset, rollout_fn, reward_fn, start))
        print(f"tandem: finished {cfg.run.steps} steps; metrics in {run_dir / 'metrics.jsonl'}", flush=True)
        return 0
    except (ConfigError, DataError, PluginError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except (ChildFailed, SyncError, PublishError, HandoffTimeout, EngineCrashLoop, checkpoint.CheckpointError,
            RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as stop:
        print("tandem: interrupted; stopping all processes", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(stop, Stop) else signal.SIGINT)
    finally:
        if sup is not None:
            sup.shutdown()


if __name__ == "__main__":
    sys.exit(main())
