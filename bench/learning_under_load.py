"""Learning on a busy machine: each job to its documented success level, quiet and beside a CPU hog.

    python bench/learning_under_load.py                                    # the full table (hours here)
    python bench/learning_under_load.py --jobs default --seeds 0           # the smallest slice
    python bench/learning_under_load.py --jobs default --seeds 0 --reproducible --steps 40

Jobs: the default job (`python train.py`, echo), `configs/counter.toml`, `configs/lookup.toml`,
each as it ships but with `--run.seed`; the success level of all three is a 5-step mean reward
>= 0.8 (README, the configs' headers). Conditions: `quiet` (nothing added: on a shared machine
that is whatever else runs; the load average is recorded with every run) and `loaded` (one busy
process per core, `python -c 'while True: pass'`, for the whole run). Per run: the success step,
seconds to it (start-up included), wall time, the load average before and after, and the
trained tokens' lag (token_lag_1: the fraction generated one weight version behind the step) and
the steps without gradient (every group's rewards equal: where the counter's failed runs end).
A run stops once its success row is in metrics.jsonl (SIGTERM, the launcher's clean stop), so
its wall time runs to that exit; `--full` runs every job to its last step. `--extra ...` passes
the rest of the command line to every run (a candidate setting, e.g. `--extra --trainer.lr 3e-3`).

`--reproducible` adds `--run.reproducible true` and, per job and seed, diffs the quiet run's
metrics rows against the loaded run's (tandem.orchestrator.reproducibility: all but the times and
the queue's momentary state); the two conditions may run in separate invocations with one
`--scratch` (a run of the other condition found there is read back for the diff).
Results: bench/results/learning_under_load[_TAG].{json,md}.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from _common import loadavg
from lora_compare import WINDOW, success_step, train_command

from tandem.orchestrator.reproducibility import row_differences

REPO = Path(__file__).resolve().parents[1]

JOBS = {"default": [], "counter": ["--config", "configs/counter.toml"], "lookup": ["--config", "configs/lookup.toml"]}
CONDITIONS = ("quiet", "loaded")


@contextmanager
def cpu_hog(on: bool):
    """One busy process per core while the block runs (none when `on` is False)."""
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)] if on else []
    try:
        yield
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def read_rows(metrics: Path) -> list[dict]:
    """The complete rows of a metrics.jsonl being written (a half-written last line is left for later)."""
    if not metrics.exists():
        return []
    lines = metrics.read_text().split("\n")[:-1]  # the text after the last newline may be incomplete
    return [json.loads(line) for line in lines if line]


def steps_without_gradient(rows: list[dict]) -> int:
    """Steps whose gradient was exactly zero, counted from the first step with a mean reward of 0.1
    (before it, a rare reward leaves most steps without one): every group's rewards were equal, so
    GRPO's advantages and the update vanished. A policy stuck there (a fixed number of tool calls,
    or none) stays stuck: this is how the counter's failed runs at trainer.lr 2e-3 ended."""
    first = next((i for i, r in enumerate(rows) if r["reward_mean"] >= 0.1), len(rows))
    return sum(1 for r in rows[first:] if r["grad_norm"] == 0.0)


def train_to_success(run_dir: Path, args: list[str], stop_early: bool) -> tuple[list[dict], float, float | None, float]:
    """Run train.py; with stop_early, SIGTERM it (the launcher's clean stop) once the success level is logged.

    Returns the rows, the wall time (start to exit, the stop included), the seconds from the start
    until the success row was seen in metrics.jsonl (polled every 0.25 s), and the mean 1-minute
    load average over the run (sampled at each poll: the machine is shared, so before and after
    alone can miss what ran beside it).
    """
    cmd = train_command(run_dir, args)
    log = run_dir.parent / f"{run_dir.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started, seen, loads = time.perf_counter(), None, []
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT)
        while proc.poll() is None:
            if seen is None and success_step(read_rows(run_dir / "metrics.jsonl")) is not None:
                seen = time.perf_counter() - started
                if stop_early:
                    proc.send_signal(signal.SIGTERM)
            loads.append(os.getloadavg()[0])
            time.sleep(0.25)
    wall = time.perf_counter() - started
    rows = read_rows(run_dir / "metrics.jsonl")
    stopped = stop_early and seen is not None and proc.returncode == 128 + signal.SIGTERM
    if proc.returncode != 0 and not stopped:
        raise SystemExit(f"{' '.join(cmd)} failed (exit {proc.returncode}); log: {log}\n{log.read_text()[-3000:]}")
    if seen is None and success_step(rows) is not None:  # reached on the last step, after the last poll
        seen = wall
    return rows, wall, seen, statistics.fmean(loads) if loads else float("nan")


def run_dir_of(job: str, seed: int, condition: str, args: argparse.Namespace) -> Path:
    return Path(args.scratch) / f"{job}_{seed}_{condition}{'_reproducible' if args.reproducible else ''}"


def one_run(job: str, seed: int, condition: str, args: argparse.Namespace) -> tuple[dict, list[dict]]:
    extra = [*JOBS[job], "--run.seed", str(seed), *(["--run.steps", str(args.steps)] if args.steps else []),
             *(["--run.reproducible", "true"] if args.reproducible else []), *args.extra]
    before = loadavg()
    run_dir = run_dir_of(job, seed, condition, args)
    with cpu_hog(condition == "loaded"):
        # a reproducible pair is compared row by row, so both runs go to the end
        rows, wall, seen, load_during = train_to_success(run_dir, extra, stop_early=not (args.reproducible or args.full))
    step = success_step(rows)
    outside_steps = wall - sum(r["step_time"] for r in rows)  # step_time runs from one trained step to the next
    result = {"job": job, "seed": seed, "condition": condition, "reproducible": args.reproducible,
              "extra": args.extra, "success_step": step, "steps": len(rows), "seconds_to_success": seen,
              "wall_s": wall, "startup_and_stop_s": outside_steps, "step_time_mean": statistics.fmean(r["step_time"] for r in rows),
              "final_reward": statistics.fmean(r["reward_mean"] for r in rows[-WINDOW:]),
              "token_lag_1": statistics.fmean(r.get("token_lag_1", 0.0) for r in rows),
              "steps_without_gradient": steps_without_gradient(rows),
              "loadavg_before": before, "loadavg_during_mean": round(load_during, 2), "loadavg_after": loadavg()}
    print(json.dumps(result), flush=True)
    return result, rows


def report(runs: list[dict], diffs: dict[str, list[str]], argv: list[str]) -> str:
    lines = ["# Learning under load: steps and seconds to the success level (5-step mean reward >= 0.8)", "",
             f"`python bench/learning_under_load.py {' '.join(argv)}`; loaded = one busy process per core beside "
             "the run; load averages (1, 5, 15 min) as read before and after each run; a run stops at its success "
             "level unless --full or --reproducible (wall s: start to exit).", "",
             "| job | seed | condition | success step | s to success | wall s | step s mean | final 5-step reward "
             "| token_lag_1 | steps without gradient | load before | load during (1-min mean) | load after |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in runs:
        to = "not reached" if r["seconds_to_success"] is None else f"{r['seconds_to_success']:.0f}"
        step = r["success_step"] or f"> {r['steps']}"
        lines.append(f"| {r['job']} | {r['seed']} | {r['condition']} | {step} | {to} | {r['wall_s']:.0f} "
                     f"| {r['step_time_mean']:.2f} | {r['final_reward']:.3f} "
                     f"| {r['token_lag_1']:.3f} | {r.get('steps_without_gradient', 'n/a')} | {fmt_load(r['loadavg_before'])} | {fmt_load([r['loadavg_during_mean']] if 'loadavg_during_mean' in r else None)} "
                     f"| {fmt_load(r['loadavg_after'])} |")
    lines.append("")
    for job in dict.fromkeys(r["job"] for r in runs):
        quiet = {r["seed"]: r for r in runs if r["job"] == job and r["condition"] == "quiet"}
        for r in (r for r in runs if r["job"] == job and r["condition"] == "loaded"):
            q = quiet.get(r["seed"])
            if q and q["seconds_to_success"] and r["seconds_to_success"]:
                lines.append(f"- {job} seed {r['seed']}: loaded reached it in {r['seconds_to_success'] / q['seconds_to_success']:.2f}× "
                             "the quiet run's seconds (target: within 2×).")
            elif q:
                lines.append(f"- {job} seed {r['seed']}: quiet {q['success_step'] or 'not reached'}, loaded "
                             f"{r['success_step'] or 'not reached'} (steps).")
    for key, found in diffs.items():
        lines.append(f"- reproducible {key}, quiet against loaded metrics rows: "
                     + ("equal (all but the times and the queue's momentary state)" if not found else
                        f"{len(found)} difference(s), first: {found[0]}"))
    return "\n".join(lines) + "\n"


def fmt_load(load: list[float] | None) -> str:
    return "n/a" if not load else " / ".join(f"{x:.1f}" for x in load)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", nargs="+", choices=list(JOBS), default=list(JOBS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--conditions", nargs="+", choices=CONDITIONS, default=list(CONDITIONS))
    ap.add_argument("--steps", type=int, default=0, help="cut every run to this many steps (0: as the job ships)")
    ap.add_argument("--reproducible", action="store_true", help="run with run.reproducible and diff quiet vs loaded")
    ap.add_argument("--full", action="store_true", help="run every job to its last step (default: stop at success)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[],
                    help="the rest of the command line goes to every train.py run (e.g. --trainer.lr 3e-3)")
    ap.add_argument("--tag", default="", help="suffix of the result files")
    ap.add_argument("--scratch", default="/tmp/tandem_learning_under_load")
    args = ap.parse_args()
    runs, rows, diffs = [], {}, {}
    for job in args.jobs:
        for seed in args.seeds:
            for condition in args.conditions:
                result, rows[(job, seed, condition)] = one_run(job, seed, condition, args)
                runs.append(result)
            if args.reproducible:  # the other condition may have run in an earlier invocation, same scratch
                pair = [rows.get((job, seed, c)) or read_rows(run_dir_of(job, seed, c, args) / "metrics.jsonl") for c in CONDITIONS]
                if all(pair):
                    diffs[f"{job} seed {seed}"] = row_differences(*pair)
    out = REPO / "bench/results" / f"learning_under_load{'_' + args.tag if args.tag else ''}"
    out.with_suffix(".json").write_text(json.dumps({"argv": sys.argv[1:], "runs": runs, "diffs": diffs}, indent=1))
    out.with_suffix(".md").write_text(report(runs, diffs, sys.argv[1:]))
    print(out.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
