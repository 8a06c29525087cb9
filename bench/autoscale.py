"""Autoscaling against every fixed fleet size, on a workload whose demand rises and falls.

    python bench/autoscale.py                     # fleets 1..4 and autoscaled 1..4, 50 steps, 2 seeds (~20 min)
    python bench/autoscale.py --workload profiles/workload/changing_demand_sharp.toml --steps 36 --tag sharp
    python bench/autoscale.py --seeds 1 --autoscale-arg=--engine.autoscale.cooldown_steps=2

Every run is `python -m tandem.lab.virtual` (tandem's producer, loop, fleet, sim engines behind
their HTTP apps, weight sync, autoscaler) on a virtual clock: exact, repeatable, immune to load on
this machine. The workload is profiles/workload/changing_demand.toml: rollouts take 0.5x the
reference run's turns, then 1.6x, then 0.5x again, as the policy's weight version advances (over
twelve versions each way; changing_demand_sharp.toml: six). A new
engine pays the engine profile's startup time (90 s for the 14B model on one H100) before it can
load the current weights (the profile's 10 s reload) and join the router.

For each seed, the fixed fleets 1..max and the autoscaled fleet (starting at min) run the same
draws. Per run:
- run time: model seconds from start to the last step's end (virtual.json);
- engine-seconds: engines that existed x seconds (a fixed fleet: size x run time; autoscaled: the
  controller's count, which includes engines starting and draining);
- against the best fixed fleet (the fastest run): time ratio and engine-seconds saved.

The issue's bar: autoscaling within 10% of the best fixed fleet's run time with at least 25% fewer
engine-seconds. Outputs (default bench/results/): autoscale[_TAG].md, .json and .png
(per step: step time of every run and the autoscaled engine count; over model time: engines).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = "profiles/workload/changing_demand.toml"
POLICY_ARGS = ["--engine.autoscale.target", "trainer_idle", "--engine.autoscale.target_idle_ratio", "0.1",
               "--engine.autoscale.hysteresis", "0.05", "--engine.autoscale.window_steps", "2",
               "--engine.autoscale.cooldown_steps", "1", "--engine.autoscale.max_change", "3"]
"""The autoscaled run's policy: hold the trainer's idle share under 10% (+5% band), measured over
two steps (async steps alternate long and short), one step's pause after each change, and jumps
of up to 3 engines (to the size the step model names)."""


def write_tasks(path: Path, n: int = 2000) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"prompt": f"sim task {i}", "label": ""}) + "\n" for i in range(n)))
    return path


def run_args(args: argparse.Namespace, run_dir: Path, tasks: Path, seed: int, engines: int | None) -> list[str]:
    """One run: a fixed fleet of `engines`, or (None) the autoscaled one starting at --min."""
    from tandem.lab.sim.profiles import load_workload_profile

    wl = load_workload_profile(REPO / args.workload)
    scale = [] if engines is not None else ["--engine.autoscale.enabled", "true", "--engine.autoscale.min",
                                             str(args.min), "--engine.autoscale.max", str(args.max),
                                             *POLICY_ARGS, *args.autoscale_arg]
    return [sys.executable, "-m", "tandem.lab.virtual", "--engines", str(engines or args.min), "--mode", "async",
            "--steps", str(args.steps), "--run-dir", str(run_dir), "--engine.backend", "sim",
            "--trainer.backend", "sim", "--engine.sim.workload", args.workload,
            "--engine.sim.token_scale", str(args.token_scale), "--rollout.function",
            "tandem.lab.sim.workload:agentic_rollout", "--rollout.reward", "tandem.lab.sim.workload:agentic_reward",
            "--data.path", str(tasks), "--rollout.prompts_per_step", str(wl.batch.prompts_per_step),
            "--rollout.samples_per_prompt", str(wl.batch.samples_per_prompt),
            "--trainer.sim.train_time_s", str(wl.train.time_s), "--model.dtype", "bfloat16",
            "--logging.live", "off", "--logging.tensorboard", "false", "--run.seed", str(seed), *scale]


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def run_one(args: argparse.Namespace, tasks: Path, seed: int, engines: int | None) -> dict:
    name = f"seed{seed}_{'auto' if engines is None else f'fixed{engines}'}"
    run_dir = Path(args.runs) / name
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.mkdir(parents=True)
    with open(run_dir / "launcher.log", "w") as log:
        rc = subprocess.run(run_args(args, run_dir, tasks, seed, engines), cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT).returncode
    shutil.rmtree(run_dir / "weights", ignore_errors=True)
    if rc != 0:
        raise RuntimeError(f"{name} exited {rc}; see {run_dir / 'launcher.log'}")
    rows = read_jsonl(run_dir / "metrics.jsonl")
    run_s = json.loads((run_dir / "virtual.json").read_text())["virtual_s"]
    events = read_jsonl(run_dir / "autoscale.jsonl")
    closed = [e for e in events if e.get("event") == "closed"]
    engine_s = closed[-1]["engine_seconds"] if closed else engines * run_s
    return {"name": name, "seed": seed, "fixed": engines, "run_s": run_s, "engine_s": engine_s,
            "steps": len(rows), "step_s": [r["step_time"] for r in rows],
            "engines": [r.get("engines", engines) for r in rows],
            "turns_mean": [r.get("sim_turns_mean", 0.0) for r in rows],
            "joins": sum(e.get("event") == "joined" for e in events),
            "leaves": sum(e.get("event") == "left" for e in events),
            "timeline": [(e["t"], e["engines"]) for e in events if "step" in e]}


def compare(runs: list[dict]) -> list[dict]:
    """Per seed: the autoscaled run against the fastest fixed fleet."""
    out = []
    for seed in sorted({r["seed"] for r in runs}):
        fixed = [r for r in runs if r["seed"] == seed and r["fixed"] is not None]
        auto = next(r for r in runs if r["seed"] == seed and r["fixed"] is None)
        best = min(fixed, key=lambda r: r["run_s"])
        out.append({"seed": seed, "best_fixed": best["fixed"], "time_ratio": auto["run_s"] / best["run_s"],
                    "engine_s_saved": 1 - auto["engine_s"] / best["engine_s"],
                    "mean_engines": auto["engine_s"] / auto["run_s"]})
    return out


def report(runs: list[dict], cmp: list[dict], args: argparse.Namespace) -> str:
    lines = [f"# Autoscaling vs fixed fleets ({args.workload}, {args.steps} async steps, virtual clock)", "",
             "| seed | fleet | run time (model s) | engine-s | mean engines | vs best fixed: time | engine-s saved |",
             "|---|---|---|---|---|---|---|"]
    for seed_cmp in cmp:
        seed = seed_cmp["seed"]
        best = next(r for r in runs if r["seed"] == seed and r["fixed"] == seed_cmp["best_fixed"])
        for r in sorted((r for r in runs if r["seed"] == seed), key=lambda r: r["fixed"] or 99):
            label = f"fixed {r['fixed']}" if r["fixed"] is not None else f"autoscaled {args.min}-{args.max}"
            lines.append(f"| {seed} | {label}{' (best)' if r is best else ''} | {r['run_s']:.0f} | {r['engine_s']:.0f} "
                         f"| {r['engine_s'] / r['run_s']:.2f} | {r['run_s'] / best['run_s']:.3f}x "
                         f"| {1 - r['engine_s'] / best['engine_s']:+.1%} |")
    ratios, saved = [c["time_ratio"] for c in cmp], [c["engine_s_saved"] for c in cmp]
    lines += ["", f"Autoscaled against the best fixed fleet over {len(cmp)} seed(s): run time "
              f"{statistics.fmean(ratios):.3f}x (range {min(ratios):.3f}-{max(ratios):.3f}), engine-seconds saved "
              f"{statistics.fmean(saved):.1%} (range {min(saved):.1%}-{max(saved):.1%}). "
              "Bar: time within 1.10x with at least 25% saved."]
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    seed0 = [r for r in runs if r["seed"] == min(r["seed"] for r in runs)]
    fig, axes = plt.subplots(1, 3, figsize=(17, 4.6))
    for r in sorted(seed0, key=lambda r: r["fixed"] or 99):
        label = f"fixed {r['fixed']}" if r["fixed"] is not None else "autoscaled"
        axes[0].plot(range(len(r["step_s"])), r["step_s"], lw=2.0 if r["fixed"] is None else 0.9,
                     color="black" if r["fixed"] is None else None, label=label)
    axes[0].set(title="Step time per step", xlabel="step", ylabel="model s")
    axes[0].legend(fontsize=7)
    auto = next(r for r in seed0 if r["fixed"] is None)
    axes[1].step(range(len(auto["engines"])), auto["engines"], where="post", color="black", label="engines serving")
    twin = axes[1].twinx()
    twin.plot(range(len(auto["turns_mean"])), auto["turns_mean"], color="tab:red", alpha=0.6, label="turns per rollout")
    twin.set_ylabel("mean turns per rollout (demand)", color="tab:red")
    axes[1].set(title="Autoscaled: engines and demand per step", xlabel="step", ylabel="engines")
    ts, ns = zip(*auto["timeline"]) if auto["timeline"] else ((), ())
    axes[2].step(ts, ns, where="post", color="black")
    axes[2].set(title="Autoscaled: engines serving over time", xlabel="model s since start", ylabel="engines")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--min", type=int, default=1)
    ap.add_argument("--max", type=int, default=4)
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--seeds", type=int, default=2)
    ap.add_argument("--jobs", type=int, default=2, help="runs in parallel (virtual clocks: the results do not change)")
    ap.add_argument("--workload", default=WORKLOAD)
    ap.add_argument("--token-scale", type=int, default=8, help="engine.sim.token_scale (CPU relief, same timing)")
    ap.add_argument("--autoscale-arg", action="append", default=[], help="extra train.py argument for the autoscaled run")
    ap.add_argument("--tag", default="", help="suffix of the output files (autoscale_TAG.*) and run directory")
    ap.add_argument("--runs", default=str(REPO / "runs/bench_autoscale"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    args = ap.parse_args(argv)
    stem = f"autoscale_{args.tag}" if args.tag else "autoscale"
    args.runs = str(Path(args.runs) / (args.tag or "default"))
    tasks = write_tasks(Path(args.runs) / "tasks.jsonl")
    plan = [(seed, n) for seed in range(args.seeds) for n in [None, *range(args.max, args.min - 1, -1)]]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(lambda job: run_one(args, tasks, *job), plan))
    cmp = compare(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = report(runs, cmp, args)
    (out / f"{stem}.md").write_text(text)
    (out / f"{stem}.json").write_text(json.dumps({"args": vars(args), "runs": runs, "compare": cmp}, indent=1))
    plot(runs, out / f"{stem}.png")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
