"""The trainer process: `python -m tandem.trainer --run-config R/views/trainer.json`.

It trains step N (numbered from 1) on the batch the orchestrator wrote to R/rollouts/step_N.json,
publishes weights version N when a sync is due (every sync.every_k_steps, and always after the
last step), and answers with R/trainer/step_N.json. The orchestrator reads that answer
to reload engines; it owns every timeout, so the trainer waits for batches as long as the
process that started it is alive.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, Callable, Protocol

from tandem import checkpoint, handoff, registry
from tandem.handoff import RoutingAgreement, TrainResult
from tandem.config import TRAINER_VIEW, read_view
from tandem.config.views import TrainerSide, TrainerView
from tandem.model_source import resolve_model_path
from tandem.sample import trained
from tandem.trainer.backend import TrainerBackend
from tandem.weights.record import Published
from tandem.weights.transport import WeightPublisher

# Upper bound only for a parent that is alive but never writes a batch; the real limit is
# the orchestrator's own timeouts, which stop the whole run.
BATCH_WAIT_S = 24 * 3600.0


class Publisher(Protocol):
    def publish(self, state_dict: dict, version: int, force_full: bool = False) -> Published:
        """Publish weight version `version` (whole weights when `force_full`): where it is and what it cost."""

    def forget_after(self, version: int) -> list[int]:
        """Remove the versions newer than `version` from the store; the ones removed."""

    def close(self) -> None:
        """Finish uploads in flight and release the store."""


def make_backend(cfg: TrainerView) -> TrainerBackend:
    """Import the configured backend lazily: megatron and its CUDA deps load only when asked for."""
    return registry.load(type(cfg.trainer).implementation, "trainer.backend")(cfg)


def parent_watch() -> Callable[[], bool]:
    """True while the launching process lives (an orphaned trainer must not wait for a day)."""
    ppid = os.getppid()
    return lambda: os.getppid() == ppid


def checkpoint_due(cfg: TrainerSide, step: int) -> bool:
    version = step + 1
    every = cfg.checkpoint.interval
    return every > 0 and (version % every == 0 or step == cfg.run.steps - 1)


def sync_due(cfg: TrainerSide, step: int) -> bool:
    # A checkpoint carries the HF weights engines resume from, so it implies a publish.
    version = step + 1
    return version % cfg.sync.every_k_steps == 0 or step == cfg.run.steps - 1 or checkpoint_due(cfg, step)


def save_checkpoint_part(backend: TrainerBackend, run_dir: str, version: int, weights_path: str | None) -> str:
    """The trainer's half of checkpoint `version`: its state per rank, plus the HF weights.

    It goes into the checkpoint's temporary directory (free space checked first; a failed
    write removes it and raises CheckpointError); the orchestrator adds its own state and
    publishes the whole with one rename (tandem/checkpoint.py).
    """
    import torch

    state = {"backend": backend.state_dict_for_checkpoint(), "torch_rng": torch.get_rng_state(), "version": version}
    tmp = checkpoint.save_trainer_part(run_dir, version, backend.rank, state,
                                       weights_path if backend.is_main_process else None)
    backend.barrier()  # every rank's part is on disk before rank 0 reports
    return str(tmp)


def load_checkpoint_part(backend: TrainerBackend, ckpt_dir: str) -> None:
    import torch

    state = torch.load(os.path.join(ckpt_dir, f"trainer_rank{backend.rank:03d}.pt"), weights_only=False)
    backend.load_checkpoint_state(state["backend"])
    torch.set_rng_state(state["torch_rng"])


def run_loop(
    cfg: TrainerView,
    backend: TrainerBackend,
    run_dir: str,
    publisher: Publisher,
    start_step: int = 0,
    is_alive: Callable[[], bool] | None = None,
    log: Callable[[str], None] = print,
) -> None:
    for step in range(start_step, cfg.run.steps):
        t_wait = time.perf_counter()
        batch = handoff.wait_batch(run_dir, step, timeout_s=BATCH_WAIT_S, is_alive=is_alive)
        wait_time = time.perf_counter() - t_wait
        if batch.checkpoint_only:  # the run is stopping before this step: save, train nothing
            save_stop_checkpoint(cfg, backend, run_dir, publisher, step)
            return
        if batch.cpu_threads:  # run.cpu_split = "phase": the orchestrator's share for this step
            import torch

            torch.set_num_threads(batch.cpu_threads)
        handover = backend.onload() if cfg.colocated else {}  # run.colocate: back from the host
        metrics = backend.train_step(trained(batch.samples))  # excluded samples stay in the batch file, untrained
        result = TrainResult(step, metrics, RoutingAgreement.take(metrics), handover, wait_time)
        if sync_due(cfg, step):
            t_pub = time.perf_counter()
            state_dict = backend.export_for_sync(cfg.trainer.lora.enabled)  # every rank: may be a collective gather
            if backend.is_main_process:
                # A checkpoint copies the published directory: it must hold whole weights, not a delta.
                result.published = publisher.publish(state_dict, step + 1, force_full=checkpoint_due(cfg, step))
                result.publish_time = time.perf_counter() - t_pub
            del state_dict
        if checkpoint_due(cfg, step):
            t_ckpt = time.perf_counter()
            weights_path = result.published.weights_path if result.published is not None else None
            result.checkpoint_tmp = save_checkpoint_part(backend, run_dir, step + 1, weights_path)
            result.checkpoint_time = time.perf_counter() - t_ckpt
        if cfg.colocated:  # the device goes to the engines before the orchestrator hears of this step
            result.handover.update(backend.offload())
        if not backend.is_main_process:
            continue
        handoff.write_train_result(run_dir, result)
        log(json.dumps({"trainer_step": step + 1, **rounded(result.to_json())}))


def rounded(payload: Any) -> Any:
    """The trainer's log line: its floats to 5 decimals."""
    if isinstance(payload, dict):
        return {k: rounded(v) for k, v in payload.items() if k != "step"}
    return round(payload, 5) if isinstance(payload, float) else payload


def save_stop_checkpoint(cfg: TrainerView, backend: TrainerBackend, run_dir: str, publisher: Publisher,
                         step: int) -> None:
    """The orchestrator stops the run before step `step` (too many failed samples): checkpoint the
    `step` steps done (their weights published whole as version `step`, which a resume reloads)."""
    state_dict = backend.export_for_sync(cfg.trainer.lora.enabled)  # every rank: may be a collective gather
    published = publisher.publish(state_dict, step, force_full=True) if backend.is_main_process else None
    del state_dict
    tmp = save_checkpoint_part(backend, run_dir, step, None if published is None else published.weights_path)
    if backend.is_main_process:
        handoff.write_train_result(run_dir, TrainResult(step, published=published, checkpoint_tmp=tmp,
                                                        checkpoint_only=True))


def publish_start_weights(cfg: TrainerView, backend: TrainerBackend, publisher, version: int) -> dict[str, Any]:
    """External engines may serve anything when the run starts (an earlier run's weights): the
    run's own starting weights are published as version `version` (0, or the checkpoint's), and
    versions past it are removed from the store first, so every engine converges on them."""
    if cfg.engine.backend != "external":
        return {}
    state_dict = backend.export_for_sync(cfg.trainer.lora.enabled)  # every rank: may be a collective gather
    if not backend.is_main_process:
        return {}
    dropped = publisher.forget_after(version)
    if dropped:
        print(f"tandem.trainer: removed weight versions {dropped} (newer than this run's start) from "
              f"{cfg.sync.url}", flush=True)
    published = publisher.publish(state_dict, version, force_full=True)
    return {"weight_version": published.version, "weights_path": published.weights_path}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tandem.trainer", description=__doc__.split("\n\n")[0])
    ap.add_argument("--run-config", required=True, help="the trainer's view of the run's config (run_dir/views/trainer.json), written by the launcher")
    ap.add_argument("--start-step", type=int, default=0, help="first training step to wait for")
    ap.add_argument("--resume-from", default=None, help="checkpoint directory to restore the trainer from")
    args = ap.parse_args(argv)

    cfg = read_view(args.run_config, TRAINER_VIEW)
    # at start-up, not after the first step

    publisher = WeightPublisher(cfg, resolve_model_path(cfg))
    backend = make_backend(cfg)
    if args.resume_from:
        load_checkpoint_part(backend, args.resume_from)
    ready = {"pid": os.getpid(), "backend": cfg.trainer.backend, "start_step": args.start_step,
             **publish_start_weights(cfg, backend, publisher, args.start_step)}
    if cfg.colocated:  # the engines generate first: the device is theirs until the first batch comes
        backend.offload()
    # The launcher gates start-up on this file: the model is loaded and the loop is about to wait.
    if backend.is_main_process:
        handoff.atomic_write_json(handoff.Path(cfg.run.run_dir) / "trainer" / "ready.json", ready)
    try:
        run_loop(cfg, backend, cfg.run.run_dir, publisher,
                 start_step=args.start_step, is_alive=parent_watch(),
                 log=lambda line: print(line, flush=True))
    finally:
        backend.close()
        publisher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
