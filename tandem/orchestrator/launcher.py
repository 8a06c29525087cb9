"""tandem's launcher: validate the config, data and plug-ins, start the engines, sglang-router and
the trainer as supervised children, run the loop (tandem/orchestrator/loop.py), tear down.

    tandem train [--resume RUN_DIR] [--section.key value ...]    (= python train.py ...)
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from pathlib import Path
from typing import Callable

from tandem import registry
from tandem.config import ConfigError, TandemConfig, load_config
from tandem.auth import MissingApiKey, api_key_from_env
from tandem.orchestrator import exit_status, preflight, run_state, stop_signal, train_command
from tandem.orchestrator.stop_signal import Stop
from tandem.placement import resolve_colocation, visible_gpu_count, visible_gpu_memory_bytes
from tandem.orchestrator.hooks import NO_HOOKS, RunHooks
from tandem.supervisor import Supervisor
from tandem.paths import PROJECT_ROOT, cache_root
from tandem.quiet import quiet_libraries
from tandem.env import EnvRollout
from tandem.eval.heldout import with_held_out
from tandem.rollout import check_contract, load_dataset_rows, load_reward_fn, load_rollout_fn


ENVIRONMENT_PATH_ARGS = (("agent", "prompt_file"), ("sandbox", "root_dir"), ("sandbox", "python"))
"""Paths among the coding environment's arguments (environment.args.TABLE.KEY)."""


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
        return str(here if here.exists() or not (PROJECT_ROOT / p).exists() else PROJECT_ROOT / p)

    cfg.run.run_dir = str(Path(cfg.run.run_dir).expanduser().resolve())
    cfg.run.cache_dir = str(cache_root(cfg.run.cache_dir))
    cfg.data.path = resolve(cfg.data.path)
    if cfg.engine.backend == "sim":
        cfg.engine.sim.profile = resolve(cfg.engine.sim.profile)
        cfg.engine.sim.workload = resolve(cfg.engine.sim.workload)
    for table, key in ENVIRONMENT_PATH_ARGS:  # untyped here: the environment's own model checks them
        args = cfg.environment.args.get(table)
        if not isinstance(args, dict):
            continue
        value = args.get(key)
        if isinstance(value, str) and "/" in value:  # a bare name (e.g. "python3") is looked up on PATH
            args[key] = resolve(value)
    if cfg.model.path != "tiny" and (Path.cwd() / cfg.model.path).exists():
        cfg.model.path = str((Path.cwd() / cfg.model.path).resolve())


def split_launcher_options(argv: list[str]) -> tuple[str | None, bool, list[str]]:
    """(`--resume R`: continue the run in R from its latest complete checkpoint; `--overwrite`: start
    afresh in a run dir that holds a run, deleting that run's outputs; the rest of argv)."""
    rest: list[str] = []
    resume, overwrite = None, False
    i = 0
    while i < len(argv):
        if argv[i] == "--resume" and i + 1 < len(argv):
            resume, i = argv[i + 1], i + 2
        elif argv[i].startswith("--resume="):
            resume, i = argv[i].split("=", 1)[1], i + 1
        elif argv[i] == "--overwrite":
            overwrite, i = True, i + 1
        else:
            rest, i = rest + [argv[i]], i + 1
    if resume and overwrite:
        raise ConfigError("--resume continues the run in its directory and --overwrite deletes it: pass one of them")
    return resume, overwrite, rest


def load_run(resume_dir: str | None, argv: list[str]) -> TandemConfig:
    """The run's config: a fresh one from config.toml and the command line, or (--resume DIR) the
    saved run's config with the command line over it."""
    if train_command.wants_help(argv):  # main(argv) called directly; the command prints it before importing us
        train_command.print_help()
        raise SystemExit(0)
    if not resume_dir:
        return load_config(argv)
    cfg = load_config(argv, base_tree=run_state.resume_base_tree(resume_dir))
    cfg.run.run_dir = resume_dir
    return cfg


def choose_colocation(cfg: TandemConfig) -> TandemConfig:
    """run.colocate = "auto": on a one-GPU box, colocated sync mode when the memory plan says it fits."""
    if cfg.run.colocate != "auto":
        return cfg
    gpus = visible_gpu_count()
    verdict = registry.load(registry.LAB["colocation_verdict"])
    cfg, said = resolve_colocation(cfg, gpus, visible_gpu_memory_bytes() if gpus == 1 else 0, verdict)
    if said:
        print(said, flush=True)
    return cfg


def check_inputs(cfg: TandemConfig, reward: Callable | None = None, rollout: Callable | None = None) -> tuple:
    """Data and plug-ins, checked before any child starts: (dataset, rollout_fn, reward_fn). `reward` and
    `rollout`, functions given in Python (tandem.api), are checked against the same contracts as the
    plug-ins the config names."""
    try:
        api_key_from_env(cfg.engine.api_key_env)
    except MissingApiKey as err:
        raise ConfigError(f"engine.api_key_env: {err}") from None
    dataset = with_held_out(cfg, load_dataset_rows(cfg.data.path, cfg.data.prompt_key))  # [eval]'s rows apart
    if dataset.skipped:
        print(f"warning: skipped {dataset.skipped} malformed row(s) of {cfg.data.path}: "
              f"{'; '.join(dataset.skipped_examples[:3])}", file=sys.stderr)
    rollout_fn = (check_contract(rollout, "rollout", cfg.rollout.function) if rollout is not None
                  else rollout_of_config(cfg))
    reward_fn = check_contract(reward, "reward", cfg.rollout.reward) if reward else load_reward_fn(cfg.rollout.reward)
    return dataset, rollout_fn, reward_fn


def rollout_of_config(cfg: TandemConfig) -> Callable:
    """The rollout the config names: an environment's, an outside harness's, or rollout.function.
    (A harness's has an `aclose` to call at the end: its endpoint.)"""
    if cfg.environment.name:
        return EnvRollout.from_config(cfg)
    if cfg.rollout.harness or cfg.rollout.harness_command:
        return registry.load(registry.HARNESS_ROLLOUT).from_config(cfg)
    return load_rollout_fn(cfg.rollout.function)


def invoked_as() -> str:
    """The command the user typed to start the launcher, for the commands it suggests."""
    return "tandem train" if Path(sys.argv[0]).name == "tandem" else "python train.py"


def start_run(cfg: TandemConfig, resumed: str | None = None, overwrite: bool = False, hooks: RunHooks = NO_HOOKS,
              load_inputs: Callable[[TandemConfig], tuple] = check_inputs) -> bool:
    """Check `cfg` (preflight: nothing starts on a problem), then run it to the end, raising whatever
    stops it; True unless a rehearsal's report found a problem. The command line (`main`) and the
    Python API (tandem.api, which hands its own data and plug-ins in through `load_inputs`) both start here."""
    quiet_libraries(cfg.logging.verbose)
    rehearse = registry.load(registry.LAB["rehearsal"]) if cfg.run.rehearse else None
    rehearsal = rehearse.start(cfg) if rehearse else None
    cfg = rehearsal.config if rehearsal else cfg
    cfg = choose_colocation(cfg)
    absolutize_paths(cfg)
    run_dir = Path(cfg.run.run_dir)
    refused = None if resumed else run_state.refusal(run_dir, overwrite, replaceable=rehearsal is not None)
    inputs = preflight.check(cfg, load_inputs, refused)
    start = (run_state.resume(run_dir, cfg) if resumed
             else run_state.fresh(run_dir, cfg, overwrite, replaceable=rehearsal is not None))
    sup = Supervisor(run_dir, PROJECT_ROOT)
    try:
        registry.load(registry.RUN_PHASE)(cfg, sup, start, inputs, hooks, invoked_as())
        return rehearse is None or rehearse.finish(rehearsal)
    except KeyboardInterrupt:
        print("tandem: interrupted; stopping all processes", file=sys.stderr, flush=True)
        raise
    finally:
        sup.shutdown()


def main(argv: list[str] | None = None, hooks: RunHooks = NO_HOOKS) -> int:
    """Exit status: 0 done, 2 bad config/data/plug-in (nothing started), 1 a failure or a run that
    stopped itself, 130/143 Ctrl-C/SIGTERM."""
    # SIGINT keeps the disposition the launcher inherited: started under nohup or as a script's
    # background job, the user asked for it to be ignored.
    stop_signal.install()
    run_dir = None
    try:
        resumed, overwrite, rest = split_launcher_options(list(sys.argv[1:] if argv is None else argv))
        cfg = load_run(resumed, rest)
        run_dir = Path(cfg.run.run_dir).expanduser().resolve()
        return 0 if start_run(cfg, resumed, overwrite, hooks) else 1
    except exit_status.EXPECTED as err:
        status = exit_status.report(err)
        failed = status == exit_status.FAILED_STATUS
        if failed and "--resume" not in str(err) and "--overwrite" not in str(err):  # a RunStopped names its way on itself
            print(f"tandem: {run_state.next_start(run_dir, invoked_as())}", file=sys.stderr)
        return status
    except KeyboardInterrupt as stop:
        print(f"tandem: stopped. {run_state.next_start(run_dir, invoked_as())}", file=sys.stderr)
        return 128 + (signal.SIGTERM if isinstance(stop, Stop) else signal.SIGINT)


def exit_now(code: int) -> None:
    """End the launcher's process with `code` once main() returned (children reaped, output written),
    skipping the interpreter's teardown: after a run it frees torch, transformers and every object they
    made, seconds of CPU (measured: ~33 s at load 68 after a Ctrl-C, bench/ctrl_c.py) before the prompt
    comes back, with nothing left to save."""
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def command(argv: list[str] | None = None) -> int:
    """`tandem train` and `python train.py`: main(), then exit_now."""
    exit_now(main(argv))
    return 1  # not reached
