"""Engine-scaling sweep against the ideal: how much faster does a step get per added engine?

    python bench/scaling.py --policies            # engines 1,2,3 x sync,async, 2 seeds (~6 min)
    python bench/scaling.py                       # + straggler and streaming variants at 3 engines
    python bench/scaling.py --engines 3 --modes async --policies hold staleness2 --seeds 1
    python bench/scaling.py --clock real          # the real launcher and processes (noisy)

Every point runs tandem's producer, loop, sim engines (the latency model of one SGLang engine
per GPU, behind their HTTP apps), weight-sync code and the workload-driven agentic rollout.
With `--clock virtual` (default) a point runs in one process on a simulated clock
(`python -m tandem.lab.virtual`, tandem/lab/sim/virtual_clock.py): exact, repeatable and immune
to load on the machine, with in-process stand-ins for sglang-router and the trainer. With
`--clock real` every point runs the REAL launcher (`python train.py`) as a subprocess, with
the sim trainer (real weight publish), `--time-scale` times faster than the modelled run.
All times below are model seconds, directly comparable with the reference run
(1 -> 3 engines: async 1200 -> 661 s, sync 1697 -> 1032 s).

`--seeds N` runs N independent sweeps (run.seed 0..N-1: the workload's draws differ); every
figure is reported per seed and as the mean and range over the seeds.

For every measured step (the warm-up steps are left out) the lower bound
(`tandem.lab.sim.sweep.analyse`) is

    async: bound = max(train, busy / N, (longest single rollout alone + sync + train) / W)
    sync:  bound = max(busy / N, longest single rollout alone + sync) + train

from the same run's trace, with W = max_staleness + 1. In sync mode nothing overlaps training
(rollout, sync and training alternate), so the rollout-side terms add the train time; in async
mode the engines work while the trainer trains, so the terms only compete.

- train time: what the trainer took (the sim trainer's configured time per step).
- engine busy time: the sim engines' busy spans (<run_dir>/sim/engine*.jsonl: prefill + decode +
  weight reload, the GPU work the step really used) inside the step's window, divided by N.
- longest single rollout alone: for every rollout of the step, its critical path on an idle
  engine, computed from its own trace with the engine profile's latency model: per turn one
  prefill of the tokens that are new since the previous turn (everything earlier cached) and a
  batch-1 decode step per further output token, plus its tool and grading time
  (tandem.lab.sim.workload records it per sample). No schedule can finish that rollout sooner. A
  rollout for step s can start no earlier than the weights it must use (version s - W) exist,
  i.e. at the end of train step s - W, and step s's training starts only after its slowest
  rollout ends, so rollout + train of one step, plus the sync that makes version s - W
  servable, fit in W step windows: no schedule beats (longest alone + sync + train) / W.

The table also shows the longest rollout as it was measured (wall time under the real load):
its ratio to the same rollout alone is the price of sharing decode batches, KV cache and prefill
time with the other rollouts, which is what keeps a latency-bound step above its bound.

Async steps are measured in whole cycles of W steps (the producer launches W steps' rollouts
close together, so step times alternate long/short), and each term is summed over the measured
span before taking the max. Efficiency = bound / measured step time. The term that sets the
bound is printed ("train", "engines", "longest") so a miss says what dominates.

Outputs (default bench/results/): scaling.md (table), scaling.json (every number), and
scaling.png (step time vs engines for both modes with bounds and the reference run, plus
queue-depth timelines). Run directories go under runs/bench_scaling/ and keep the full
traces (metrics.jsonl, queue.jsonl, sim/*.jsonl, logs/).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, replace
from pathlib import Path

from tandem.lab.sim.profiles import load_workload_profile
from tandem.lab.sim.sweep import (Point, Result, across_seeds, analyse, cycle_steps, default_policy, speedup_by_seed,
                              warmup_steps)

REPO = Path(__file__).resolve().parents[1]
REFERENCE = {"async": {1: 1200, 2: 840, 3: 661}, "sync": {1: 1697, 2: 1047, 3: 1032}}
POLICIES = ("drain", "abort", "continue")
"""The partial-rollout policies a variant point can run."""
CONFIG_VARIANTS = {
    "priority_admission": ["--rollout.staleness.request_priority", "admission"],
    "hold": ["--rollout.staleness.admission_hold", "true"],
    "staleness_by_admission": ["--rollout.staleness.measured_by", "admission"],
}
"""Streaming variants a point can run at the largest engine count (against the default config)."""


# --------------------------------------------------------------------------- running
def write_tasks(path: Path, n: int) -> Path:
    """The sim workload draws everything from the profile; rows only name distinct tasks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": f"sim task {i}", "label": ""}) + "\n" for i in range(n)))
    return path


def steps_for(p: Point, args: argparse.Namespace) -> int:
    return warmup_steps(p) + args.cycles * cycle_steps(p)


def model_time_scale(args: argparse.Namespace) -> float:
    """Model seconds per recorded second: time_scale in real time; 1 on the virtual clock."""
    return 1.0 if args.clock == "virtual" else args.time_scale


def launcher_args(p: Point, args: argparse.Namespace, run_dir: Path, tasks: Path) -> list[str]:
    wl = load_workload_profile(args.workload)
    # The same train.py arguments either way; the virtual runner reads them with tandem's config loader.
    entry = ["-m", "tandem.lab.virtual"] if args.clock == "virtual" else [str(REPO / "train.py")]
    return [
        sys.executable, *entry,
        "--engines", str(p.engines), "--mode", p.mode, "--steps", str(steps_for(p, args)), "--run-dir", str(run_dir),
        "--engine.backend", "sim", "--trainer.backend", "sim",
        "--engine.sim.profile", str(args.engine_profile), "--engine.sim.workload", str(args.workload),
        "--engine.sim.time_scale", str(model_time_scale(args)), "--engine.sim.token_scale", str(args.token_scale),
        "--rollout.function", args.rollout_function,
        "--rollout.reward", "tandem.lab.sim.workload:agentic_reward",
        "--data.path", str(tasks),
        "--rollout.prompts_per_step", str(wl.batch.prompts_per_step),
        "--rollout.samples_per_prompt", str(wl.batch.samples_per_prompt),
        "--rollout.staleness.partial_rollout", p.policy, "--rollout.oversample", str(p.oversample),
        "--rollout.staleness.max", str(p.staleness),
        "--trainer.sim.train_time_s", str(wl.train.time_s),
        "--trainer.sim.weight_size_gb", str(wl.train.weight_size_gb),
        "--model.dtype", "bfloat16",
        "--logging.live", "off", "--logging.tensorboard", "false",
        "--run.seed", str(p.seed), "--run.keep_rollouts", "all",  # the analysis reads every step's trainer file
        *args.extra, *p.extra,
    ]


def run_point(p: Point, args: argparse.Namespace, tasks: Path) -> Result:
    run_dir = Path(args.runs) / p.name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    cmd = launcher_args(p, args, run_dir, tasks)
    t0 = time.time()
    cpu0 = _children_cpu()
    with open(run_dir / "launcher.log", "w") as log:
        try:
            proc = subprocess.run(cmd, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, timeout=args.point_timeout)
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            rc = -9
    wall = time.time() - t0
    cpu = _children_cpu() - cpu0
    if rc != 0:
        text = (run_dir / "launcher.log").read_text(errors="replace")
        errors = [line for line in text.splitlines() if line.startswith("error:")]
        why = errors[-1] if errors else "..." + text[-800:]
        return Result(p, False, wall, error=f"{'tandem.lab.virtual' if args.clock == 'virtual' else 'train.py'} "
                                            f"exited {rc}: {why}")
    try:
        r = analyse(p, run_dir, model_time_scale(args), wall)
        # Virtual points may run in parallel, so the children's CPU total is not theirs alone:
        # the virtual runner measures its own.
        own = run_dir / "virtual.json"
        r.cpu_s = json.loads(own.read_text())["cpu_s"] if own.exists() else cpu
        return r
    except Exception as err:  # a broken trace is a finding, not a crash of the sweep
        return Result(p, False, wall, error=f"analysis failed: {type(err).__name__}: {err}")
    finally:
        shutil.rmtree(run_dir / "weights", ignore_errors=True)  # the traces stay, the bytes go


def _children_cpu() -> float:
    import resource

    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


# --------------------------------------------------------------------------- reporting
def on_grid(r: Result, mode: str) -> bool:
    """A successful point of the engines x modes grid (the default policy, no variant)."""
    p = r.point
    return (r.ok and p.mode == mode and p.policy == default_policy() and p.oversample == 1.0 and p.staleness == 1
            and not p.tag)


def table(results: list[Result]) -> str:
    head = ("| mode | engines | policy | seed | step s | rollout s | train s | sync s | trainer idle | queue med | "
            "queue peak | engine busy/N s | longest rollout s | longest alone s | bound s | bound set by | efficiency | "
            "length bias | dropped samples / discarded groups | wall s | CPU s | engine lag ms | loop lag ms |")
    ncols = head.count("|") - 1
    lines = [head, "|" + "|".join("---" for _ in range(ncols)) + "|"]
    for r in results:
        p = r.point
        if not r.ok:
            lines.append(f"| {p.mode} | {p.engines} | {p.label} | {p.seed} | failed: {r.error[:120]!r} |"
                         + " |" * (ncols - 5))
            continue
        lines.append(
            f"| {p.mode} | {p.engines} | {p.label} | {p.seed} | {r.step_s:.0f} | {r.rollout_s:.0f} | {r.train_s:.0f} | "
            f"{r.sync_s:.0f} | {r.idle_ratio:.2f} | {r.queue_median:.0f} | {r.queue_peak} | "
            f"{r.busy_per_engine_s + r.reload_per_engine_s:.0f} | {r.longest_rollout_s:.0f} | "
            f"{r.longest_alone_s:.0f} | {r.bound_s:.0f} | "
            f"{r.dominant} | {r.efficiency:.2f} | {r.length_bias_turns:.2f} | "
            f"{r.dropped_stale} / {r.discarded_groups} | "
            f"{r.wall_s:.0f} | {r.cpu_s:.0f} | {1e3 * r.engine_lag_s:.0f} | "
            f"{1e3 * r.loop_lag_s:.0f} |")
    return "\n".join(lines)


def speedups(results: list[Result]) -> list[str]:
    """1 -> N engines per mode: per seed (each seed is an independent sweep), then mean and range."""
    out = []
    for mode in ("async", "sync"):
        engines = sorted({r.point.engines for r in results if on_grid(r, mode)})
        for n in (n for n in engines if n > 1):
            per_seed = speedup_by_seed(results, mode, n, on_grid)
            if not per_seed:
                continue
            ratios = list(per_seed.values())
            mean = sum(ratios) / len(ratios)
            ref = REFERENCE[mode][1] / REFERENCE[mode][n] if n in REFERENCE[mode] else float("nan")
            seeds = ", ".join(f"seed {k}: {v:.2f}x" for k, v in sorted(per_seed.items()))
            out.append(f"{mode}: 1 -> {n} engines: **{mean:.2f}x** mean over {len(ratios)} sweep(s), range "
                       f"{min(ratios):.2f}-{max(ratios):.2f}x, spread ±{50 * (max(ratios) - min(ratios)) / mean:.1f}% "
                       f"({seeds}; reference run: {ref:.2f}x)")
    return out


def summary(results: list[Result]) -> str:
    """Every point as the mean and range over its seeds."""
    lines = ["| mode | engines | policy | seeds | step s mean (range) | efficiency mean (range) | length bias mean (min) |",
             "|---|---|---|---|---|---|---|"]
    for a in across_seeds(results):
        p = a.point
        lines.append(f"| {p.mode} | {p.engines} | {p.label} | {len(a.seeds)} | {a.step_s[0]:.0f} ({a.step_s[1]:.0f}-"
                     f"{a.step_s[2]:.0f}) | {a.efficiency[0]:.2f} ({a.efficiency[1]:.2f}-{a.efficiency[2]:.2f}) | "
                     f"{a.length_bias_turns[0]:.2f} ({a.length_bias_turns[1]:.2f}) |")
    return "\n".join(lines)


# --------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--modes", nargs="+", choices=["sync", "async"], default=["sync", "async"])
    ap.add_argument("--policies", nargs="*", default=None,
                    help="straggler variants run in async mode at the largest engine count, besides the grid's "
                         "default policy: drain, abort, continue (partial-rollout policies), 'oversample' = the default "
                         "policy with rollout.oversample = --oversample, 'staleness2' = max_staleness 2, and the streaming "
                         "variants " + ", ".join(CONFIG_VARIANTS))
    ap.add_argument("--oversample", type=float, default=1.25)
    ap.add_argument("--seeds", type=int, default=2,
                    help="independent sweeps, run.seed 0..N-1 (the workload's draws differ): every figure is "
                         "reported per seed and as the mean and range over them")
    ap.add_argument("--jobs", type=int, default=2, help="virtual clock only: points run in parallel")
    ap.add_argument("--cycles", type=int, default=2,
                    help="measured cycles per point after the warm-up; a cycle is 1 step in sync mode and "
                         "max_staleness + 1 steps in async mode")
    ap.add_argument("--clock", choices=["virtual", "real"], default="virtual",
                    help="virtual: each point runs in one process on a simulated clock (python -m tandem.lab.virtual: "
                         "exact, repeatable, seconds of CPU); real: the real launcher and processes, --time-scale "
                         "times faster than modelled time (noisy on a shared machine)")
    ap.add_argument("--time-scale", type=float, default=120.0, help="real clock only: engine.sim.time_scale")
    ap.add_argument("--engine-profile", default=str(REPO / "profiles/engine/qwen3_14b_h100.toml"))
    ap.add_argument("--workload", default=str(REPO / "profiles/workload/reference_agentic.toml"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    ap.add_argument("--runs", default=str(REPO / "runs/bench_scaling"))
    ap.add_argument("--point-timeout", type=float, default=300.0)
    ap.add_argument("--token-scale", type=int, default=8,
                    help="engine.sim.token_scale: wire tokens carry this many modelled tokens (CPU relief, same timing)")
    ap.add_argument("--rollout-function", default="tandem.lab.sim.workload:agentic_rollout")
    ap.add_argument("--reanalyse", action="store_true",
                    help="do not run anything: recompute the tables and plot from the run directories under --runs")
    ap.add_argument("--extra", default="", help="extra train.py arguments for every point, one string "
                                                "(e.g. --extra='--router.policy power_of_two')")
    return ap


def sweep_points(ap: argparse.ArgumentParser, args: argparse.Namespace) -> list[Point]:
    """The engines x modes grid at the default policy, then each variant at the largest engine count."""
    if args.policies is None:
        args.policies = [p for p in POLICIES if p != default_policy()] + ["oversample", *CONFIG_VARIANTS]
    points = [Point(mode, n) for mode in args.modes for n in args.engines]
    top = max(args.engines)
    variants: list[Point] = []
    for pol in args.policies:
        if pol == default_policy():
            continue
        if pol in POLICIES:
            variants.append(Point("async", top, policy=pol))
        elif pol == "oversample":
            variants.append(Point("async", top, oversample=args.oversample))
        elif pol == "staleness2":
            variants.append(Point("async", top, staleness=2))
        elif pol in CONFIG_VARIANTS:
            variants.append(Point("async", top, tag=pol, extra=CONFIG_VARIANTS[pol]))
        else:
            ap.error(f"unknown policy variant {pol!r}")
    return [replace(p, seed=seed) for seed in range(args.seeds) for p in points + variants]


def reanalyse_point(p: Point, args: argparse.Namespace, previous: dict[str, dict]) -> Result:
    """A point's result from its kept run directory, with the wall / CPU figures of the real run."""
    before = previous.get(p.name, {})
    try:
        r = analyse(p, Path(args.runs) / p.name, model_time_scale(args), before.get("wall_s", 0.0))
        r.cpu_s = before.get("cpu_s", 0.0)
    except (OSError, ValueError, KeyError) as err:
        r = Result(p, False, 0.0, error=f"cannot re-analyse: {err}")
    return r


def measure_point(p: Point, args: argparse.Namespace, tasks: Path, t_start: float) -> Result:
    r = run_point(p, args, tasks)
    if not r.ok and r.wall_s < 60 and args.clock == "real":
        # A start-up failure (typically a free port taken by another process between
        # picking and binding it, on a shared machine) is retried once.
        print(f"[{time.time() - t_start:5.0f}s] {p.name}: start-up failed, retrying once: {r.error[-200:]}",
              flush=True)
        r = run_point(p, args, tasks)
    status = (f"step {r.step_s:7.0f} s  bound {r.bound_s:7.0f} s ({r.dominant})  eff {r.efficiency:.2f}  "
              f"cpu {r.cpu_s:.0f}s lag engine {1e3 * r.engine_lag_s:.0f}ms loop {1e3 * r.loop_lag_s:.0f}ms"
              if r.ok else f"FAILED: {r.error[-300:]}")
    print(f"[{time.time() - t_start:5.0f}s] {p.name:<28} {status}  (wall {r.wall_s:.0f}s)", flush=True)
    return r


def repo_relative(path: str) -> Path | str:
    return Path(path).relative_to(REPO) if Path(path).is_relative_to(REPO) else path


def result_json(r: Result) -> dict:
    """Every number of a point, less its queue timeline: that stays in the run's queue.jsonl (a
    virtual-clock point samples it every 0.5 model s, megabytes per sweep)."""
    return {**{k: v for k, v in asdict(r).items() if k != "queue_series"}, "point": asdict(r.point)}


def write_report(results: list[Result], args: argparse.Namespace, out: Path, total: float) -> None:
    clock = "virtual clock" if args.clock == "virtual" else f"real time, time_scale {args.time_scale:g}"
    md = [f"# Engine-scaling sweep (sim engines, {clock}, token_scale {args.token_scale}, "
          f"{args.cycles} measured cycle(s) per point after warm-up)", "",
          f"Profiles: `{repo_relative(args.engine_profile)}`, `{repo_relative(args.workload)}`. "
          f"All times are model seconds. Sweep wall time: {total:.0f} s.", "",
          "Each point over the seeds (each seed is an independent sweep):", "", summary(results), "",
          "Every run:", "", table(results), "",
          *[f"- {line}" for line in speedups(results)]]
    (out / "scaling.md").write_text("\n".join(md) + "\n")
    (out / "scaling.json").write_text(json.dumps({"args": {k: v for k, v in vars(args).items()},
                                                  "wall_s": total,
                                                  "results": [result_json(r) for r in results]},
                                                 indent=1))
    from _scaling_plot import plot  # beside this script; loaded with matplotlib only when a report is written

    plot(results, out / "scaling.png", on_grid, REFERENCE)
    print("\n".join(md[4:]))
    print(f"\nwrote {out / 'scaling.md'}, {out / 'scaling.json'}, {out / 'scaling.png'} in {total:.0f} s")


def main(argv: list[str] | None = None) -> int:
    ap = build_parser()
    args = ap.parse_args(argv)
    args.extra = shlex.split(args.extra)
    if args.seeds < 1:
        ap.error("--seeds must be >= 1")
    if args.cycles < 1:
        ap.error("--cycles must be >= 1")
    points = sweep_points(ap, args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tasks = Path(args.runs) / "tasks.jsonl" if args.reanalyse else write_tasks(Path(args.runs) / "tasks.jsonl", 64)
    t_start = time.time()
    previous: dict[str, dict] = {}
    if args.reanalyse and (out / "scaling.json").exists():  # keep the wall / CPU figures of the real runs
        old = json.loads((out / "scaling.json").read_text())
        previous = {Point(**r["point"]).name: r for r in old.get("results", [])}
        total_before = old.get("wall_s", 0.0)
    jobs = args.jobs if args.clock == "virtual" else 1  # real-clock points need the machine to themselves
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(lambda p: reanalyse_point(p, args, previous) if args.reanalyse
                                else measure_point(p, args, tasks, t_start), points))
    total = total_before if args.reanalyse and previous else time.time() - t_start
    write_report(results, args, out, total)
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
