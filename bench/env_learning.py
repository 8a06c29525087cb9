"""The bundled tool-use environments learning from a random tiny model, on this machine.

    python bench/env_learning.py                 # 2 rounds: default job, lookup, counter
    python bench/env_learning.py --rounds 3 --only lookup

Per round, in this order so that all three see the same machine load: the default job
(`python train.py`, the baseline: single-turn echo), `configs/lookup.toml` and
`configs/counter.toml`, each as its config ships. Reported per run: the first step whose
5-step mean reward reaches the success level (0.8), the seconds until then (the launcher's
wall clock, start-up included), the whole run's wall time, and the environment's time to
success as a multiple of the default job's in the same round. Results:
bench/results/env_learning.{md,json,png} (reward against step and against seconds).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from lora_compare import SUCCESS, WINDOW, success_step, train

REPO = Path(__file__).resolve().parents[1]
JOBS = {"default": [], "lookup": ["--config", "configs/lookup.toml"], "counter": ["--config", "configs/counter.toml"]}
BUDGET_S = 15 * 60
"""The bar each environment must meet: the default job's, under 15 minutes on this machine."""


def run_round(round_: int, jobs: list[str], scratch: Path) -> list[dict]:
    out = []
    for job in jobs:
        rows, wall = train(scratch / f"{job}", JOBS[job])
        step = success_step(rows)
        startup = wall - sum(r["step_time"] for r in rows)  # step_time runs from one trained step to the next
        to_success = None if step is None else startup + sum(r["step_time"] for r in rows[:step])
        extra = {k: rows[-1][k] for k in ("env_tool_calls_mean", "env_turns_mean") if k in rows[-1]}
        out.append({"round": round_, "job": job, "success_step": step, "seconds_to_success": to_success,
                    "wall_s": wall, "steps": len(rows), "startup_s": startup,
                    "final_reward": statistics.fmean(r["reward_mean"] for r in rows[-WINDOW:]), **extra,
                    "curve": [[r["step"], r["reward_mean"], round(startup + sum(x["step_time"] for x in rows[:i + 1]), 2)]
                              for i, r in enumerate(rows)]})
        print(json.dumps({k: v for k, v in out[-1].items() if k != "curve"}), flush=True)
    return out


def report(runs: list[dict]) -> str:
    lines = ["# Bundled environments: time to the success level (5-step mean reward >= 0.8)", "",
             "`python bench/env_learning.py`; each config as it ships, random tiny model, this machine (2 CPU cores).",
             "", "| round | job | success step | s to success | x default job (same round) | wall s, whole run | "
             "steps | final 5-step reward |", "|---|---|---|---|---|---|---|---|"]
    base = {r["round"]: r["seconds_to_success"] for r in runs if r["job"] == "default"}
    for r in runs:
        seconds = "not reached" if r["seconds_to_success"] is None else f"{r['seconds_to_success']:.1f}"
        ratio = ("n/a" if r["job"] == "default" or not base.get(r["round"]) or r["seconds_to_success"] is None
                 else f"{r['seconds_to_success'] / base[r['round']]:.2f}")
        lines.append(f"| {r['round']} | {r['job']} | {r['success_step']} | {seconds} | {ratio} | {r['wall_s']:.1f} | "
                     f"{r['steps']} | {r['final_reward']:.3f} |")
    lines.append("")
    for job in sorted({r["job"] for r in runs} - {"default"}):
        times = [r["seconds_to_success"] for r in runs if r["job"] == job]
        reached = [t for t in times if t is not None]
        verdict = "under" if reached and len(reached) == len(times) and max(reached) < BUDGET_S else "NOT under"
        spread = f"{min(reached):.0f}-{max(reached):.0f} s" if reached else "never"
        lines.append(f"- {job}: success in {len(reached)}/{len(times)} runs, {spread}: {verdict} the "
                     f"{BUDGET_S // 60}-minute bar.")
    return "\n".join(lines) + "\n"


def plot(runs: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    jobs = [j for j in JOBS if any(r["job"] == j for r in runs)]
    fig, axes = plt.subplots(2, len(jobs), figsize=(4.5 * len(jobs), 6.5), squeeze=False)
    for col, job in enumerate(jobs):
        for r in (r for r in runs if r["job"] == job):
            steps, rewards, seconds = zip(*r["curve"])
            label = f"round {r['round']}"
            axes[0][col].plot(steps, rewards, label=label, lw=1)
            axes[1][col].plot(seconds, rewards, label=label, lw=1)
        axes[0][col].set_title(job)
        axes[0][col].set_xlabel("step")
        axes[1][col].set_xlabel("seconds since launch")
        for row in axes:
            row[col].axhline(SUCCESS, color="grey", ls="--", lw=0.8)
            row[col].set_ylabel("mean reward")
            row[col].set_ylim(-0.02, 1.02)
            row[col].legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", choices=list(JOBS), action="append", help="run only these jobs (repeatable)")
    ap.add_argument("--scratch", default=str(REPO / "runs" / "bench_env_learning"))
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "env_learning"))
    args = ap.parse_args()
    jobs = args.only or list(JOBS)
    runs = [r for round_ in range(1, args.rounds + 1) for r in run_round(round_, jobs, Path(args.scratch))]
    out = Path(args.out)
    out.with_suffix(".json").write_text(json.dumps(runs, indent=1))
    out.with_suffix(".md").write_text(report(runs))
    plot(runs, out.with_suffix(".png"))
    print(report(runs))


if __name__ == "__main__":
    sys.exit(main())
