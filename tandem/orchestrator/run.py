"""The composition root: one function, `compose`, builds a run's parts from the config into one `Run`,
which `tandem.orchestrator.loop.run_loop` drives. A kind of run (the real one with child processes,
tandem.orchestrator.real_run; the one-process virtual-clock one, tandem.lab.virtual) differs from
another only in its `Edges`: where the engines and the trainer are, and what watches them.

The clock is the event loop's: the real run drives the loop on asyncio's, a virtual run on
tandem.lab.sim.virtual_clock's, and nothing in a `Run` reads the time another way.
"""

from __future__ import annotations

from concurrent.futures import Executor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine

from tandem.autoscale.controller import Autoscaler
from tandem.config import TandemConfig
from tandem.orchestrator import run_state
from tandem.orchestrator.colocation import Colocation
from tandem.orchestrator.cpu_share import CpuShare, FixedShare
from tandem.orchestrator.evaluation import Evaluation
from tandem.orchestrator.fleet import Fleet
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks
from tandem.orchestrator.live_view import LiveView
from tandem.orchestrator.metrics import MetricsLog, QueueMonitor
from tandem.orchestrator.producer import RolloutProducer
from tandem.orchestrator.trainer_link import TrainerLink
from tandem.orchestrator.wandb_log import WandbLog
from tandem.rollout import EngineClient, PromptCursor, RolloutContext, sampling_params_from_config


@dataclass
class Edges:
    """What a kind of run injects: everything else `compose` builds the same way for every run. No
    field has a default, so a builder names each part (None where its kind of run has none, and says
    why); tests/test_composition.py compares the real run's builder with the virtual one's."""
    tokenizer: Any
    client: EngineClient
    executor: Executor
    """Runs sandboxes and graders (they block)."""
    fleet: Fleet
    trainer: TrainerLink
    queues: QueueMonitor | None
    """The engines' queues, for the live view's rows (None: no rows)."""
    cpu: CpuShare | FixedShare
    """How a CPU box's cores are split between rollout and training, step by step."""
    colocation: Colocation | None
    """run.colocate: the engines release their GPU memory for each train step."""
    autoscale_provider: Callable[[], Any]
    """Builds [engine.autoscale]'s provider, called only when autoscaling is on."""
    watchers: list[Callable[[Run], Coroutine[Any, Any, None]]]
    """Tasks that run beside the loop until it ends (queue sampling, the children watcher, the
    engine doctor); one that raises stops the run."""


@dataclass
class Run:
    """A run's parts, as `run_loop` uses them. Tests build one with faked parts; a launcher builds it
    with `compose`."""
    cfg: TandemConfig
    run_dir: Path
    start_step: int
    ctx: RolloutContext
    """The tokenizer, the engine client, the executor and the reward function the rollouts use."""
    producer: RolloutProducer
    trainer: TrainerLink
    fleet: Fleet
    metrics: MetricsLog
    view: LiveView
    evaluation: Evaluation
    """In-run evaluation and the alarms."""
    cpu: CpuShare | FixedShare
    colocation: Colocation | None = None
    autoscaler: Autoscaler | None = None
    watchers: tuple[Callable[[Run], Coroutine[Any, Any, None]], ...] = ()
    hooks: RunHooks = NO_HOOKS


def make_producer(cfg: TandemConfig, ctx: RolloutContext, dataset, rollout_fn,
                  start: run_state.StartPoint) -> RolloutProducer:
    """The rollout producer for a run starting at `start` (fresh, or a checkpoint's cursor and
    in-flight prompts)."""
    cursor = PromptCursor(len(dataset.rows), cfg.run.seed, cfg.data.shuffle,
                          **({k: start.cursor[k] for k in ("epoch", "position")} if start.cursor else {}))
    return RolloutProducer(ctx, dataset.rows, cursor, rollout_fn, start_step=start.step,
                           total_steps=cfg.run.steps, staleness=cfg.effective_staleness,
                           engine_version=start.weight_version, in_flight_rows=start.in_flight_rows)


def compose(cfg: TandemConfig, run_dir: Path, start: run_state.StartPoint, inputs: tuple, edges: Edges,
            hooks: RunHooks = NO_HOOKS) -> Run:
    """The run's parts from the config, around `edges`; the producer is started (rollouts begin)."""
    dataset, rollout_fn, reward_fn = inputs
    ctx = RolloutContext(cfg, edges.tokenizer, edges.client, edges.executor, reward_fn,
                         sampling_params_from_config(cfg))
    producer = make_producer(cfg, ctx, dataset, rollout_fn, start)
    wandb = (WandbLog(cfg, run_dir, lambda ids: ctx.tokenizer.decode(ids, skip_special_tokens=False))
             if cfg.logging.wandb.mode != "disabled" else None)
    metrics = MetricsLog(run_dir, cfg.logging.tensorboard, start.step, wandb)
    view = LiveView(cfg.run.steps, start.step, edges.queues, cfg.logging.live)
    producer.start()
    autoscaler = (Autoscaler(cfg, edges.fleet, edges.autoscale_provider(), run_dir)
                  if cfg.engine.autoscale.enabled else None)
    evaluation = Evaluation.of_run(cfg, run_dir, metrics, view, start.step, ctx, rollout_fn, dataset.held_out)
    return Run(cfg, run_dir, start.step, ctx, producer, edges.trainer, edges.fleet, metrics, view, evaluation,
               edges.cpu, edges.colocation, autoscaler, tuple(edges.watchers), hooks)
