"""`python -m tandem.lab.virtual [--publish-s S] <train.py arguments>`: one sim run, in one process,
on a virtual clock.

The same producer, loop (`run_loop`), sim engines (scheduler, backend and HTTP app), weight sync
(`Fleet.sync` -> `tandem.weights.sync_engines`) and workload rollout as `python train.py` with
engine.backend = trainer.backend = sim, but on `tandem.lab.sim.virtual_clock.VirtualClockLoop`:
when every task waits on a timer, time jumps to the next one. A run takes the CPU its code needs,
is not disturbed by other load on the machine, and repeats exactly (same seed -> same metrics).

What takes the place of child processes (tandem.lab.inprocess): engines behind their FastAPI
apps through httpx's ASGITransport, a stand-in for sglang-router's sticky routing, and a trainer
that trains for `trainer.sim.train_time_s` of loop time and publishes small real weight files
followed by `--publish-s` modelled seconds. engine.sim.time_scale is forced to 1 (virtual seconds
are model seconds); engine.sim.token_scale still applies (it changes wire sizes, not timing).

The run directory gets what `tandem.lab.sim.sweep.analyse` reads from a real run: config.json,
metrics.jsonl, queue.jsonl, sim/engine*.jsonl, trainer/step_N.json. Not supported: --resume,
checkpoints (checkpoint.interval is set to 0), engine faults and the engine doctor. Autoscaling
(engine.autoscale) is: new engines start in-process after the engine profile's startup time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from tandem.config import ConfigError, TandemConfig, load_config
from tandem.model_source import load_tokenizer, resolve_model_path
from tandem.orchestrator import exit_status, run_state
from tandem.orchestrator.fleet import Fleet
from tandem.orchestrator.launcher import absolutize_paths, check_inputs
from tandem.orchestrator.cpu_share import FIXED
from tandem.orchestrator.loop import drive
from tandem.orchestrator.run import Edges, Run, compose
from tandem.engine_api import parse_load
from tandem.supervisor import Supervisor
from tandem.paths import PROJECT_ROOT
from tandem.rollout import EngineClient
from tandem.lab.sim import virtual_clock
from tandem.lab.inprocess import DEFAULT_PUBLISH_S, ROUTER_URL, InProcessEngines, InProcessRouter, SimProvider, \
    VirtualTrainer


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m tandem.lab.virtual", description=__doc__.split("\n\n")[0],
                                 add_help=False)
    ap.add_argument("--publish-s", type=float, default=DEFAULT_PUBLISH_S,
                    help="modelled seconds the trainer takes to publish one weight version")
    ap.add_argument("--overwrite", action="store_true",
                    help="start afresh in a run dir that holds a run, deleting that run's outputs")
    return ap


def prepare(argv: list[str]) -> tuple[TandemConfig, float, bool]:
    """The run config from train.py's arguments (tandem's own loader), adjusted for a virtual run;
    the modelled publish time; and whether --overwrite was given."""
    own, rest = build_parser().parse_known_args(argv)
    if any(a == "--resume" or a.startswith("--resume=") for a in rest):
        raise ConfigError("--resume is not supported by a virtual-clock run")
    cfg = load_config(rest)
    absolutize_paths(cfg)
    if cfg.engine.backend != "sim" or cfg.trainer.backend != "sim":
        raise ConfigError("a virtual-clock run needs engine.backend = sim and trainer.backend = sim "
                          f"(got {cfg.engine.backend!r}, {cfg.trainer.backend!r})")
    notes = []
    if cfg.engine.sim.time_scale != 1:
        notes.append(f"engine.sim.time_scale {cfg.engine.sim.time_scale:g} -> 1 (virtual seconds are model seconds)")
        cfg.engine.sim.time_scale = 1.0
    if cfg.checkpoint.interval:
        notes.append(f"checkpoint.interval {cfg.checkpoint.interval} -> 0 (no checkpoints in a virtual run)")
        cfg.checkpoint.interval = 0
    if cfg.logging.live == "on":
        notes.append("logging.live on -> off (a line per step: a held frame would mix virtual and wall seconds)")
    cfg.logging.live = "off"
    for note in notes:
        print(f"tandem.lab.virtual: {note}", file=sys.stderr, flush=True)
    return cfg, own.publish_s, own.overwrite


async def sample_queues(engines: InProcessEngines, path: Path, interval_s: float) -> None:
    """queue.jsonl as QueueMonitor writes it, from the cores directly, on the loop's clock."""
    with open(path, "a") as f:
        while True:
            now = virtual_clock.unix_time()
            for name, load in engines.loads().items():
                seen = parse_load(load)
                f.write(json.dumps({"t": now, "engine": name, "waiting": seen.waiting, "running": seen.running}) + "\n")
            await asyncio.sleep(interval_s)


async def run_virtual(cfg: TandemConfig, inputs: tuple, publish_s: float) -> None:
    """Engines up in-process, then the run composed and driven as the real one is, around `virtual_edges`."""
    model_path = resolve_model_path(cfg)
    tokenizer = load_tokenizer(model_path, cfg.model.trust_remote_code)
    engines = await InProcessEngines.start(cfg, model_path, tokenizer)
    try:
        edges = virtual_edges(cfg, engines, model_path, tokenizer, publish_s)
        await drive(compose(cfg, Path(cfg.run.run_dir), run_state.StartPoint(), inputs, edges))
    finally:
        await engines.close()


VIRTUAL_LEAVES_OUT = {
    "queues": "the engines' queues are sampled from their cores directly (sample_queues), not over HTTP",
    "colocation": "no GPU to hand over between engines and trainer in one process",
}
"""The parts of the real run's `Edges` that a virtual run has none of, and why (tests/test_composition.py)."""


def virtual_edges(cfg: TandemConfig, engines: InProcessEngines, model_path: str, tokenizer: Any,
                  publish_s: float) -> Edges:
    """In-process engines behind a stand-in router, a trainer on the loop's clock, no child processes
    (so no children watcher and no engine doctor), one CPU split (FIXED: the virtual clock does not
    count CPU)."""
    run_dir = Path(cfg.run.run_dir)
    router = InProcessRouter(cfg, engines.urls, engines.http, engines.gone)
    client = EngineClient(ROUTER_URL, cfg.rollout.client.concurrency, cfg.rollout.client.request_timeout_s, post=router.post)
    # The fleet's own view of who serves (an engine joins it only once loaded and routed).
    fleet = Fleet(cfg, Supervisor(run_dir, PROJECT_ROOT), dict(engines.urls), ROUTER_URL, http=engines.http,
                  router=router)

    async def queue_monitor(run: Run) -> None:
        await sample_queues(engines, run_dir / "queue.jsonl", cfg.logging.queue_sample_interval_s)

    # Sandboxes and graders run inline: a worker thread would finish at a wall time the virtual clock ignores.
    return Edges(tokenizer=tokenizer, client=client, executor=virtual_clock.InlineExecutor(), fleet=fleet,
                 trainer=VirtualTrainer(cfg, model_path, publish_s), queues=None, cpu=FIXED, colocation=None,
                 autoscale_provider=lambda: SimProvider(engines), watchers=[queue_monitor])

def run(argv: list[str]) -> dict[str, float]:
    """One virtual run; returns its virtual, wall and CPU seconds (also written to virtual.json)."""
    cfg, publish_s, overwrite = prepare(argv)
    inputs = check_inputs(cfg)
    run_dir = Path(cfg.run.run_dir)
    run_state.fresh(run_dir, cfg, overwrite)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    clock: dict[str, float] = {}

    async def main() -> None:
        try:
            await run_virtual(cfg, inputs, publish_s)
        finally:
            clock["virtual_s"] = asyncio.get_running_loop().time()

    virtual_clock.run(main())
    summary = {**clock, "wall_s": time.perf_counter() - wall0, "cpu_s": time.process_time() - cpu0,
               "publish_s": publish_s}
    (run_dir / "virtual.json").write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: list[str] | None = None) -> int:
    """Exit status as train.py's: 0 done, 2 bad config/data/plug-in, 1 a failure."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # as the engines: no downloads at run time
    try:
        s = run(list(sys.argv[1:] if argv is None else argv))
    except exit_status.EXPECTED as err:
        return exit_status.report(err)
    print(f"tandem.lab.virtual: {s['virtual_s']:.0f} virtual s in {s['wall_s']:.1f} wall s, {s['cpu_s']:.1f} CPU s",
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
