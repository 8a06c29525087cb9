"""The RL loop: one loop for both modes. The producer may run `staleness` weight versions ahead
of the trainer (0 = sync), so rollout for step k+staleness overlaps training on step k."""

from __future__ import annotations

import asyncio
import functools
import json
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Protocol

from tandem import checkpoint
from tandem.config import TandemConfig
from tandem.handoff import prune_step_files, wait_train_result, write_batch
from tandem.model_source import load_tokenizer
from tandem.orchestrator import run_state
from tandem.autoscale.controller import Autoscaler
from tandem.autoscale.providers import CommandProvider, EngineProvider, NodeProvider
from tandem.orchestrator.cluster import Cluster, engine_command
from tandem.orchestrator.colocation import Colocation
from tandem.orchestrator.cpu_share import FIXED, CpuShare, FixedShare
from tandem.orchestrator.evaluation import Evaluation
from tandem.orchestrator.failures import FailureGuard, RunStopped, StepFailures
from tandem.auth import bearer_headers
from tandem.orchestrator.external import ExternalFleet
from tandem.orchestrator.fleet import Fleet
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks
from tandem.orchestrator.live_view import LiveView
from tandem.orchestrator.metrics import MetricsLog, QueueMonitor, rollout_metrics
from tandem.orchestrator.wandb_log import WandbLog
from tandem.orchestrator.producer import RolloutProducer, RolloutsFailing, StepBatch
from tandem.supervisor import ChildFailed, Supervisor
from tandem.rollout import EngineClient, PromptCursor, RolloutContext, sampling_params_from_config
from tandem.rollout.direct import router_workers
from tandem.orchestrator.signal import prepare_step, trained

TRAIN_KEYS = ("loss", "kl", "entropy", "clip_frac", "seq_clip_frac", "grad_norm", "logprob_mismatch", "train_time")
SYNC_KEYS = ("publish_bytes", "changed_fraction", "encode_time", "upload_time")
"""What the trainer reports about each publish (bytes written, the changed-element fraction of a delta)."""


class TrainerLink(Protocol):
    """How the loop reaches the trainer: hand it a step's batch, then wait for its answer (the
    training metrics, and `weight_version`/`weights_path` when it published weights)."""

    async def submit(self, step: int, samples: list, cpu_threads: int | None = None) -> None:
        """`cpu_threads`: the torch threads to train this step with (None: keep the current count)."""

    async def result(self, step: int) -> dict: ...

    async def checkpoint_only(self, step: int, samples: list, reason: str) -> dict:
        """The run stops before `step`: have the trainer checkpoint the steps done and train nothing
        (`samples`, the step's failed samples, are kept in its batch file for inspection)."""


class FileTrainerLink:
    """The trainer child process: batches and answers cross as files in the run directory."""

    def __init__(self, run_dir: Path, cfg: TandemConfig, cluster: Cluster):
        self.run_dir, self.cfg, self.cluster = run_dir, cfg, cluster

    async def submit(self, step: int, samples: list, cpu_threads: int | None = None) -> None:
        extra = {"cpu_threads": cpu_threads} if cpu_threads else None
        await asyncio.to_thread(write_batch, self.run_dir, step, samples, extra)  # off the loop: rollouts keep flowing

    async def result(self, step: int) -> dict:
        return await wait_trainer(self.run_dir, step, self.cfg, self.cluster)

    async def checkpoint_only(self, step: int, samples: list, reason: str) -> dict:
        self.cluster.trainer.critical = False  # it exits once the checkpoint is written: not a failure
        await asyncio.to_thread(write_batch, self.run_dir, step, samples, {"checkpoint_only": reason})
        return await self.result(step)


async def sync_weights(cfg: TandemConfig, step: int, result: dict, fleet: Fleet, ctx: RolloutContext,
                       producer: RolloutProducer, view: LiveView, colocation: Colocation | None,
                       evaluation: Evaluation) -> float:
    """Load the version the trainer published (if it published one) into every engine, once an
    evaluation running on the old one has ended (and, with run.reproducible, every running rollout); then
    evaluate the new weights if due. The load's seconds."""
    if cfg.run.reproducible and result.get("weight_version") is not None:
        view.set_status(f"step {step + 1}: run.reproducible: letting the running rollouts finish on their weights")
        await producer.settled()
    await evaluation.before_sync(result)  # an evaluation ends on the version it started on
    reload_s = await load_published(cfg, step, result, fleet, ctx, producer, view, colocation)
    await evaluation.after_step(step + 1, producer.version)
    return reload_s


async def load_published(cfg: TandemConfig, step: int, result: dict, fleet: Fleet, ctx: RolloutContext,
                         producer: RolloutProducer, view: LiveView, colocation: Colocation | None) -> float:
    if result.get("weight_version") is None:
        return 0.0
    view.set_status(f"step {step + 1}: syncing weights v{result['weight_version']} (waiting on engines)")
    load = functools.partial(fleet.sync, ctx.engine, result["weights_path"], result["weight_version"],
                             cfg.rollout.staleness.partial_rollout, cfg.sync.reload_timeout_s)
    reload_s = await (load() if colocation is None else colocation.sync(load))
    await producer.set_version(result["weight_version"])
    return reload_s


async def run_loop(cfg: TandemConfig, run_dir: Path, producer: RolloutProducer, ctx: RolloutContext,
                   trainer: TrainerLink, fleet: Fleet, metrics: MetricsLog, view: LiveView, start_step: int,
                   hooks: RunHooks = NO_HOOKS, cpu: CpuShare | FixedShare = FIXED, evaluation: Evaluation | None = None,
                   autoscaler: Autoscaler | None = None, colocation: Colocation | None = None) -> None:
    """The whole RL loop. Rollout for step k+staleness overlaps training on step k. With `colocation`
    (run.colocate, sync mode) the engines release their memory for the train step and take it back
    around the weight sync (tandem.orchestrator.colocation); `evaluation`, tandem.orchestrator.evaluation."""
    # Steps are timed at the trainer's cadence: from one trained step to the next, so
    # step_time = trainer_wait_time (rollout tail + weight sync) + train time. The loop's clock,
    # not time.monotonic(): a simulated run drives the same loop on a virtual clock.
    clock = asyncio.get_running_loop().time
    last_result = clock()
    guard = FailureGuard(run_dir, cfg.run.max_failed_fraction, cfg.run.failed_window_steps,
                         cfg.environment.name or cfg.rollout.reward)
    evaluation = await Evaluation.started(evaluation, cfg, run_dir, metrics, view, start_step, producer.version)
    for step in range(start_step, cfg.run.steps):
        view.set_status(f"step {step + 1}: rolling out (waiting on engines)")
        batch, failures = await take_step(step, producer, guard, trainer, run_dir, cfg, hooks)  # 1. rollout
        threads = await cpu.training_starts()
        if colocation is not None:
            view.set_status(f"step {step + 1}: engines releasing their memory")
            await colocation.release(step)
        await trainer.submit(step, batch.samples, threads)
        batch_written = clock()
        view.set_status(f"step {step + 1}: training (waiting on trainer)")
        result = await trainer.result(step)                                # 2. train
        result_at = clock()
        prune_step_files(run_dir, step + 1, cfg.run.keep_rollouts)
        cpu.training_done(result.get("train_time", 0.0), batch.rollout_time)
        reload_s = await sync_weights(cfg, step, result, fleet, ctx, producer, view, colocation, evaluation)  # 3. sync
        # Rows number steps from 1, as the console, the handoff files and the checkpoints do: the
        # row of step N follows checkpoint N-1 and carries weight version N once it is synced.
        row = {"step": step + 1, "weight_version": producer.version, **rollout_metrics(batch.samples, step),
               **{k: result.get(k, 0.0) for k in (*TRAIN_KEYS, *(k for k in result if k.startswith("routing_")))},
               "step_time": result_at - last_result, "rollout_time": batch.rollout_time,
               "sync_time": reload_s + result.get("publish_time", 0.0), "reload_time": reload_s,
               **{k: result.get(k, 0.0) for k in SYNC_KEYS}, "apply_time": fleet.apply_s,
               "trainer_wait_time": batch_written - last_result, "eval_wait_time": evaluation.take_wait(),
               "gen_tokens_per_s": sum(s.num_model_tokens for s in batch.samples) / max(batch.rollout_time, 1e-9),
               "reward_errors": failures.reward_errors, "rollout_errors": failures.rollout_errors,
               "dropped_stale": batch.dropped_stale, "recycled_groups": batch.recycled,
               "oversample_discarded": batch.discarded, "longest_group_s": batch.longest_group_s,
               "requests_retried": ctx.engine.retried, **ctx.engine.load.take(), **fleet.metrics(), **batch.stats,
               **cpu.metrics(), **(colocation.metrics(result) if colocation is not None else {}),
               **step_plugin_metrics(producer.rollout_fn, batch.samples)}
        row["trainer_idle_ratio"] = row["trainer_wait_time"] / max(row["step_time"], 1e-9)
        if autoscaler is not None:  # decides on this step; a resize runs in the background
            row.update(await autoscaler.after_step(row))
        alarms = evaluation.check(row)
        metrics.log(row, batch.samples)
        view.step_done(row)
        if result.get("checkpoint_tmp"):  # checkpoint (atomic), after the row: checkpoint N => rows 1..N
            view.set_status(f"step {step + 1}: checkpointing")
            finalize_checkpoint(run_dir, step + 1, producer, cfg, hooks)
        if reason := evaluation.stop_reason(alarms):  # run.stop_on_alarm: checkpoint, then stop (exit 1)
            await stop_run(reason, step + 1, [], [], producer, trainer, run_dir, cfg, guard, hooks)
        last_result = result_at
    await evaluation.finish()
    view.set_status(f"finished {cfg.run.steps} steps")  # the last frame says so, not "checkpointing"


async def take_step(step: int, producer: RolloutProducer, guard: FailureGuard, trainer: TrainerLink, run_dir: Path,
                    cfg: TandemConfig, hooks: RunHooks) -> tuple[StepBatch, StepFailures]:
    """Step `step`'s batch and its failure counts; stops the run (RunStopped, after a checkpoint)
    instead when failed rewards or rollouts pass the bound (tandem.orchestrator.failures)."""
    try:
        batch = await producer.take(step)
    except RolloutsFailing as err:
        guard.first_rollout_failure(step + 1, err.failed)
        rows = [g.row_pos for g in producer.take_failed()]
        await stop_run(str(err), step, [], rows, producer, trainer, run_dir, cfg, guard, hooks)
    counts = guard.observe(step + 1, batch)
    reason = guard.stop_reason(step + 1, counts)
    if not reason:  # advantages, and which samples carry a signal (tandem.orchestrator.signal)
        batch.stats.update(prepare_step(batch.samples, cfg.rollout, cfg.trainer.loss.use_std_norm))
        if batch.samples and not trained(batch.samples):
            reason = f"no sample of step {step + 1} is left to train: failed rewards left no group two valid samples"
    if reason:
        rows = [g.row_pos for g in batch.groups] + [g.row_pos for g in batch.failed_groups]
        await stop_run(reason, step, batch.samples, rows, producer, trainer, run_dir, cfg, guard, hooks)
    return batch, counts


async def stop_run(reason: str, step: int, samples: list, rows: list[int], producer: RolloutProducer,
                   trainer: TrainerLink, run_dir: Path, cfg: TandemConfig, guard: FailureGuard,
                   hooks: RunHooks) -> None:
    """Stop before training `step`: checkpoint the steps done (`rows`, the failing step's prompts,
    first in its queue), then raise RunStopped naming the cause and the way back."""
    guard.save(reason)
    if not cfg.checkpoint.interval:
        raise RunStopped(f"run stopped: {reason}. Checkpoints are off (checkpoint.interval = 0), so there is nothing "
                         f"to resume from; fix the cause and start again with `--overwrite` (or `--run-dir DIR`)")
    if step not in checkpoint.complete_steps(run_dir):
        await trainer.checkpoint_only(step, samples, reason)
        finalize_checkpoint(run_dir, step, producer, cfg, hooks, first_rows=rows)
    raise RunStopped(f"run stopped: {reason}. Checkpoint {checkpoint.final_dir(run_dir, step).name} holds the "
                     f"{step} step(s) done; fix the cause, then continue with `--resume {run_dir}` (details in "
                     f"{guard.path})")


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


def finalize_checkpoint(run_dir: Path, next_step: int, producer: RolloutProducer, cfg: TandemConfig,
                        hooks: RunHooks = NO_HOOKS, first_rows: list[int] | tuple = ()) -> None:
    """`first_rows`: prompts taken but not trained (a stopped step's), regenerated first on resume."""
    data = producer.checkpoint_state()
    state = run_state.orchestrator_state(next_step, producer.version, data["cursor"],
                                         {"in_flight_rows": list(first_rows) + data["in_flight_rows"]})
    checkpoint.finalize(run_dir, next_step, state, cfg.checkpoint.keep_last,
                        before_rename=lambda: hooks.at("checkpoint", next_step))


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


def make_autoscaler(cfg: TandemConfig, fleet: Fleet, sup: Supervisor, cluster: Cluster, run_dir: Path,
                    model_path: str) -> Autoscaler | None:
    """[engine.autoscale]: the controller with its provider and policy (the user's, if named)."""
    scale = cfg.engine.autoscale
    if not scale.enabled:
        return None
    provider: EngineProvider
    if scale.provider == "command":
        provider = CommandProvider(cfg, sup)
    else:
        spare = cluster.placement.engine_gpus[cfg.engine.count:scale.max]
        provider = NodeProvider(cfg, sup, cluster.placement,
                                lambda name, port: engine_command(cfg, name, port, run_dir, model_path), spare)
    return Autoscaler(cfg, fleet, provider, run_dir)


def make_producer(cfg: TandemConfig, ctx: RolloutContext, dataset, rollout_fn,
                  start: run_state.StartPoint) -> RolloutProducer:
    """The rollout producer for a run starting at `start` (fresh, or a checkpoint's cursor and
    in-flight prompts)."""
    cursor = PromptCursor(len(dataset.rows), cfg.run.seed, cfg.data.shuffle,
                          **({k: start.cursor[k] for k in ("epoch", "position")} if start.cursor else {}))
    return RolloutProducer(ctx, dataset.rows, cursor, rollout_fn, start_step=start.step,
                           total_steps=cfg.run.steps, staleness=cfg.effective_staleness,
                           engine_version=start.weight_version, in_flight_rows=start.in_flight_rows)


async def run_until_first_exit(tasks: list[asyncio.Task], producer: RolloutProducer, view: LiveView,
                               metrics: MetricsLog, ctx: RolloutContext, fleet: Fleet,
                               evaluation: Evaluation | None = None) -> None:
    """Wait until one of the run's tasks ends (re-raising what stopped it), then tear down the
    tasks, the producer, an evaluation still running, and everything the loop opened."""
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise whatever stopped us
    finally:
        for task in tasks:
            task.cancel()
        if evaluation is not None:
            await evaluation.cancel()
        await producer.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        view.close()
        metrics.close()
        await ctx.engine.close()
        await fleet.close()
        ctx.executor.shutdown(wait=False, cancel_futures=True)


async def orchestrate(cfg: TandemConfig, run_dir: Path, sup: Supervisor, cluster: Cluster, model_path: str,
                      dataset, rollout_fn, reward_fn, start: run_state.StartPoint,
                      hooks: RunHooks = NO_HOOKS) -> None:
    headers = bearer_headers(cfg.engine.api_key_env)  # the engines' API key, if they want one
    client = EngineClient(cluster.router_url, cfg.rollout.client.concurrency, cfg.rollout.client.request_timeout_s,
                          headers=headers)
    if cfg.trainer.moe.wants_routing:  # the router drops return_routed_experts: straight to its engines
        client.ask_routed_experts(router_workers(cluster.router_url, headers))
    # Sandboxes and graders block; size their pool to the rollouts in flight, not asyncio's default.
    executor = ThreadPoolExecutor(max_workers=cfg.rollout.client.concurrency + 16, thread_name_prefix="rollout")
    ctx = RolloutContext(cfg, load_tokenizer(model_path, cfg.model.trust_remote_code), client, executor, reward_fn,
                         sampling_params_from_config(cfg))
    external = cfg.engine.backend == "external"
    fleet = (ExternalFleet if external else Fleet)(cfg, sup, cluster.engines, cluster.router_url, hooks)
    if cluster.start_weights is not None:  # external engines converge on the run's starting weights
        await fleet.sync(client, cluster.start_weights[0], cluster.start_weights[1], "drain",
                         cfg.sync.reload_timeout_s)
    elif start.checkpoint_dir is not None:  # engines come back on the checkpoint's weights
        await fleet.sync(client, str(start.checkpoint_dir / "hf"), start.weight_version, "drain",
                         cfg.sync.reload_timeout_s)
    producer = make_producer(cfg, ctx, dataset, rollout_fn, start)
    monitor = QueueMonitor(cluster.engines, run_dir / "queue.jsonl", cfg.logging.queue_sample_interval_s,
                           headers=headers)
    wandb = (WandbLog(cfg, run_dir, lambda ids: ctx.tokenizer.decode(ids, skip_special_tokens=False))
             if cfg.logging.wandb.mode != "disabled" else None)
    metrics = MetricsLog(run_dir, cfg.logging.tensorboard, start.step, wandb)
    view = LiveView(cfg.run.steps, start.step, monitor, cfg.logging.live)
    producer.start()
    trainer = FileTrainerLink(run_dir, cfg, cluster)
    cpu = CpuShare(cluster.placement.cores, cfg.engine.count, cfg.effective_staleness > 0, fleet.set_cpu_threads,
                   adapt=not cfg.run.reproducible) if cluster.placement.phase_split else FIXED
    autoscaler = make_autoscaler(cfg, fleet, sup, cluster, run_dir, model_path)
    colocation = Colocation(fleet, client, cfg.sync.reload_timeout_s, cluster.placement.engines_on_gpu, hooks) \
        if cfg.colocated else None
    evaluation = Evaluation.of_run(cfg, run_dir, metrics, view, start.step, ctx, rollout_fn, dataset.held_out)
    tasks = [asyncio.create_task(run_loop(cfg, run_dir, producer, ctx, trainer, fleet, metrics, view, start.step,
                                          hooks, cpu, evaluation, autoscaler, colocation)),
             asyncio.create_task(watch_children(sup, metrics, view, cfg.faults.stall_warning_s)),
             asyncio.create_task(monitor.run(), name="queue-monitor")]
    if cfg.faults.max_engine_restarts > 0 or external:  # external engines are never restarted, only re-admitted
        tasks.append(asyncio.create_task(fleet.run_doctor(), name="engine-doctor"))
    try:
        await run_until_first_exit(tasks, producer, view, metrics, ctx, fleet, evaluation)
    finally:
        if (close_rollout := getattr(rollout_fn, "aclose", None)) is not None:  # a harness's endpoint
            await close_rollout()
        if autoscaler is not None:
            await autoscaler.close()
        if fleet.recoveries:
            (run_dir / "recoveries.json").write_text(json.dumps([r.__dict__ for r in fleet.recoveries], indent=1))
