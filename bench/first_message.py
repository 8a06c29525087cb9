"""Time to the first message of a run that is refused: checkouts side by side, interleaved.

    python bench/first_message.py --tree before=/path/to/old --tree now=.            # 3 trials
    python bench/first_message.py --tree now=. --trials 5 --out bench/results/first_message.json

Each trial runs every case once per checkout, the checkouts alternating (so machine load drifts over
all of them alike), each as `python train.py ARGS` in that checkout with PYTHONPATH at it. Cases:

- bad_key: `--bogus.key 1` (an unknown config key, exit 2);
- used_run_dir: `--run-dir D` where D holds a run (one metrics row), exit 2;
- env_used_run_dir: the same with `--config configs/coding_agent.toml` (an environment run);
- help: `--help` (exit 0);
- tandem_train_help: `python -m tandem.cli train --help` (= `tandem train --help`, exit 0).

Recorded per run: wall_s (start to exit; the refusal is the last thing it prints), first_output_s
(start to the first byte on stdout or stderr), cpu_s (user + system of the process and anything it
waited for, from wait4), exit, and the 1-minute load average before it started. The summary gives the
median of each with its spread (min–max). CPU time is the figure that load does not inflate: on a quiet machine the wall time of
this single-threaded path comes close to it.
"""

from __future__ import annotations

import argparse
import json
import os
import selectors
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CASES = {
    "bad_key": ["train.py", "--bogus.key", "1"],
    "used_run_dir": ["train.py", "--run-dir", "{used}"],
    "env_used_run_dir": ["train.py", "--config", "configs/coding_agent.toml", "--run-dir", "{used}"],
    "help": ["train.py", "--help"],
    "tandem_train_help": ["-m", "tandem.cli", "train", "--help"],
}
"""Each case's arguments to the interpreter."""


def load_1min() -> float:
    return float(Path("/proc/loadavg").read_text().split()[0])


def one_run(tree: Path, args: list[str], timeout_s: float) -> dict:
    """Run `python ARGS` in `tree`; its times, CPU and exit status."""
    env = {**os.environ, "PYTHONPATH": str(tree), "HF_HUB_OFFLINE": "1"}
    load = load_1min()
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, *args], cwd=tree, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first, tail = None, b""
    sel = selectors.DefaultSelector()
    for stream in (proc.stdout, proc.stderr):
        sel.register(stream, selectors.EVENT_READ)
    while sel.get_map() and time.monotonic() - started < timeout_s:
        for key, _ in sel.select(timeout=1.0):
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                continue
            first = first if first is not None else time.monotonic() - started
            tail = (tail + chunk)[-400:]
    if sel.get_map():
        proc.kill()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - started
    return {"wall_s": round(wall, 3), "first_output_s": None if first is None else round(first, 3),
            "cpu_s": round(usage.ru_utime + usage.ru_stime, 3), "exit": os.waitstatus_to_exitcode(status),
            "load_1min": load, "last_output": tail.decode(errors="replace").strip().splitlines()[-1:]}


def summarize(results: dict) -> list[str]:
    lines = ["| case | tree | runs | exit | wall: median (min–max) | first output | CPU user+sys: median (min–max) "
             "| load (1-min) |", "|---|---|---|---|---|---|---|---|"]
    for case, per_tree in results.items():
        for tree, runs in per_tree.items():
            def spread(key: str) -> str:
                values = [r[key] for r in runs if r[key] is not None]
                return f"{statistics.median(values):.2f} s ({min(values):.2f}–{max(values):.2f})"
            lines.append(f"| {case} | {tree} | {len(runs)} | {sorted({r['exit'] for r in runs})} | "
                         f"{spread('wall_s')} | {spread('first_output_s')} | {spread('cpu_s')} | "
                         f"{min(r['load_1min'] for r in runs):.2f}–{max(r['load_1min'] for r in runs):.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", required=True, help="NAME=PATH of a checkout (repeatable)")
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--timeout", type=float, default=300.0)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in opts.tree)}
    used = Path(tempfile.mkdtemp(prefix="tandem_used_run_"))
    (used / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward_mean": 0.0}) + "\n")
    results: dict = {case: {name: [] for name in trees} for case in opts.cases}
    for name, tree in trees.items():  # unmeasured: the files into the page cache, .pyc written
        one_run(tree, CASES["bad_key"], opts.timeout)
    for trial in range(opts.trials):
        for case in opts.cases:
            for name, tree in trees.items():
                args = [a.format(used=used) for a in CASES[case]]
                run = one_run(tree, args, opts.timeout)
                results[case][name].append(run)
                print(f"trial {trial} {case} {name}: {run}", flush=True)
    print("\n".join(summarize(results)))
    if opts.out:
        opts.out.write_text(json.dumps({"trees": {k: str(v) for k, v in trees.items()}, "results": results},
                                       indent=1) + "\n")


if __name__ == "__main__":
    main()
