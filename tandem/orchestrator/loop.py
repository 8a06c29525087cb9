"""The RL loop: one loop for both modes. The producer may run `staleness` weight versions ahead
of the trainer (0 = sync), so rollout for step k+staleness overlaps training on step k. Its parts
come in one `Run` (tandem.orchestrator.run.compose builds it)."""

from __future__ import annotations

import asyncio
import functools
import json

from tandem import checkpoint
from tandem.handoff import TrainResult, prune_step_files
from tandem.orchestrator import run_state, stop_signal
from tandem.orchestrator.failures import FailureGuard, RunStopped, StepFailures
from tandem.orchestrator.producer import RolloutsFailing, StepBatch
from tandem.orchestrator.run import Run
from tandem.orchestrator.signal import prepare_step, trained
from tandem.orchestrator.step_row import StepTimes, step_row


async def run_loop(run: Run) -> None:
    """The whole RL loop. Rollout for step k+staleness overlaps training on step k. With colocation
    (run.colocate, sync mode) the engines release their memory for the train step and take it back
    around the weight sync (tandem.orchestrator.colocation). Times are on the loop's clock, not
    time.monotonic(): a virtual run drives this same loop on a virtual clock."""
    cfg, run_dir, view, clock = run.cfg, run.run_dir, run.view, asyncio.get_running_loop().time
    guard = FailureGuard(run_dir, cfg.run.max_failed_fraction, cfg.run.failed_window_steps,
                         cfg.environment.name or cfg.rollout.reward)
    last_result = clock()
    await run.evaluation.at_start(run.start_step, run.producer.version)  # its wait is in step 1's step_time
    for step in range(run.start_step, cfg.run.steps):
        stop_signal.raise_if_requested()  # a SIGTERM whose exception Python dropped still stops the run
        view.set_status(f"step {step + 1}: rolling out (waiting on engines)")
        batch, failures = await take_step(run, step, guard)                                 # 1. rollout
        await hand_to_trainer(run, step, batch)
        batch_written = clock()
        view.set_status(f"step {step + 1}: training (waiting on trainer)")
        result = await run.trainer.result(step)                                             # 2. train
        result_at = clock()
        prune_step_files(run_dir, step + 1, cfg.run.keep_rollouts)
        run.cpu.training_done(result.train_time, batch.rollout_time)
        reload_s = await sync_weights(run, step, result)                                    # 3. sync
        row = step_row(run, step, batch, failures, result,
                       StepTimes(result_at - last_result, batch_written - last_result, reload_s))
        await step_done(run, step, row, batch, result, guard)                               # 4. log, checkpoint
        last_result = result_at
    await run.evaluation.finish()
    view.set_status(f"finished {cfg.run.steps} steps")  # the last frame says so, not "checkpointing"


async def hand_to_trainer(run: Run, step: int, batch: StepBatch) -> None:
    """The CPU split for training, the engines' memory released (colocated), then the batch."""
    threads = await run.cpu.training_starts()
    if run.colocation is not None:
        run.view.set_status(f"step {step + 1}: engines releasing their memory")
        await run.colocation.release(step)
    await run.trainer.submit(step, batch.samples, threads)


async def step_done(run: Run, step: int, row: dict, batch: StepBatch, result: TrainResult, guard: FailureGuard) -> None:
    """The autoscaler and the alarms read the row; it is logged and shown; the checkpoint follows
    it (checkpoint N => rows 1..N); an alarm with run.stop_on_alarm stops the run (exit 1)."""
    if run.autoscaler is not None:  # decides on this step; a resize runs in the background
        row.update(await run.autoscaler.after_step(row))
    alarms = run.evaluation.check(row)
    run.metrics.log(row, batch.samples)
    run.view.step_done(row)
    if result.checkpoint_tmp:  # atomic, after the row
        run.view.set_status(f"step {step + 1}: checkpointing")
        finalize_checkpoint(run, step + 1)
    if reason := run.evaluation.stop_reason(alarms):
        await stop_run(run, reason, step + 1, [], [], guard)


async def sync_weights(run: Run, step: int, result: TrainResult) -> float:
    """Load the version the trainer published (if it published one) into every engine, once an
    evaluation running on the old one has ended (and, with run.reproducible, every running rollout); then
    evaluate the new weights if due. The load's seconds."""
    if run.cfg.run.reproducible and result.published is not None:
        run.view.set_status(f"step {step + 1}: run.reproducible: letting the running rollouts finish on their weights")
        await run.producer.settled()
    await run.evaluation.before_sync(result)  # an evaluation ends on the version it started on
    reload_s = await load_published(run, step, result)
    await run.evaluation.after_step(step + 1, run.producer.version)
    return reload_s


async def load_published(run: Run, step: int, result: TrainResult) -> float:
    if (published := result.published) is None:
        return 0.0
    run.view.set_status(f"step {step + 1}: syncing weights v{published.version} (waiting on engines)")
    load = functools.partial(run.fleet.sync, run.ctx.engine, published.weights_path, published.version,
                             run.cfg.rollout.staleness.partial_rollout, run.cfg.sync.reload_timeout_s)
    reload_s = await (load() if run.colocation is None else run.colocation.sync(load))
    await run.producer.set_version(published.version)
    return reload_s


async def take_step(run: Run, step: int, guard: FailureGuard) -> tuple[StepBatch, StepFailures]:
    """Step `step`'s batch and its failure counts; stops the run (RunStopped, after a checkpoint)
    instead when failed rewards or rollouts pass the bound (tandem.orchestrator.failures)."""
    cfg, producer = run.cfg, run.producer
    try:
        batch = await producer.take(step)
    except RolloutsFailing as err:
        guard.first_rollout_failure(step + 1, err.failed)
        rows = [g.row_pos for g in producer.take_failed()]
        await stop_run(run, str(err), step, [], rows, guard)
    counts = guard.observe(step + 1, batch)
    reason = guard.stop_reason(step + 1, counts)
    if not reason:  # advantages, and which samples carry a signal (tandem.orchestrator.signal)
        loss = cfg.trainer.loss
        batch.stats.update(prepare_step(batch.samples, cfg.rollout, loss.use_std_norm, loss.advantage_baseline))
        if batch.samples and not trained(batch.samples):
            reason = f"no sample of step {step + 1} is left to train: failed rewards left no group two valid samples"
    if reason:
        rows = [g.row_pos for g in batch.groups] + [g.row_pos for g in batch.failed_groups]
        await stop_run(run, reason, step, batch.samples, rows, guard)
    return batch, counts


async def stop_run(run: Run, reason: str, step: int, samples: list, rows: list[int], guard: FailureGuard) -> None:
    """Stop before training `step`: checkpoint the steps done (`rows`, the failing step's prompts,
    first in its queue), then raise RunStopped naming the cause and the way back."""
    guard.save(reason)
    if not run.cfg.checkpoint.interval:
        raise RunStopped(f"run stopped: {reason}. Checkpoints are off (checkpoint.interval = 0), so there is nothing "
                         f"to resume from; fix the cause and start again with `--overwrite` (or `--run-dir DIR`)")
    if step not in checkpoint.complete_steps(run.run_dir):
        await run.trainer.checkpoint_only(step, samples, reason)
        finalize_checkpoint(run, step, first_rows=rows)
    raise RunStopped(f"run stopped: {reason}. Checkpoint {checkpoint.final_dir(run.run_dir, step).name} holds the "
                     f"{step} step(s) done; fix the cause, then continue with `--resume {run.run_dir}` (details in "
                     f"{guard.path})")


def finalize_checkpoint(run: Run, next_step: int, first_rows: list[int] | tuple = ()) -> None:
    """`first_rows`: prompts taken but not trained (a stopped step's), regenerated first on resume."""
    data = run.producer.checkpoint_state()
    state = run_state.orchestrator_state(next_step, run.producer.version, data["cursor"],
                                         {"in_flight_rows": list(first_rows) + data["in_flight_rows"]})
    checkpoint.finalize(run.run_dir, next_step, state, run.cfg.checkpoint.keep_last,
                        before_rename=lambda: run.hooks.at("checkpoint", next_step))


async def drive(run: Run) -> None:
    """Run the loop beside the run's watchers until one of them ends (re-raising what stopped it),
    then tear down the tasks, the producer, an evaluation still running, and everything the run opened."""
    tasks = [asyncio.create_task(run_loop(run), name="run-loop"),
             *(asyncio.create_task(watch(run), name=getattr(watch, "__name__", "watcher")) for watch in run.watchers)]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            task.result()  # re-raise whatever stopped us
    finally:
        for task in tasks:
            task.cancel()
        await run.evaluation.cancel()
        await run.producer.stop()
        await asyncio.gather(*tasks, return_exceptions=True)
        await close(run)


async def close(run: Run) -> None:
    run.view.close()
    run.metrics.close()
    await run.ctx.engine.close()
    await run.fleet.close()
    run.ctx.executor.shutdown(wait=False, cancel_futures=True)
    if (close_rollout := getattr(run.producer.rollout_fn, "aclose", None)) is not None:  # a harness's endpoint
        await close_rollout()
    if run.autoscaler is not None:
        await run.autoscaler.close()
    if run.fleet.recoveries:
        (run.run_dir / "recoveries.json").write_text(json.dumps([r.__dict__ for r in run.fleet.recoveries], indent=1))
