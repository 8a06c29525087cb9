"""Time to the first step: this checkout against another, at several fleet sizes, interleaved.

    python bench/startup.py --old /path/to/old/checkout            # engines 1 and 3, 2 rounds
    python bench/startup.py --old ../before --engines 1 3 --rounds 3 --out bench/results/startup_2.json

Each round starts `train.py --engines N --mode async --steps 1` once per side and fleet size (the
sides alternate, so machine load drifts over both alike) in a fresh run dir, and records:

- first_step_s: from starting the launcher to the first row of metrics.jsonl (the first step
  trained): start-up (engines, router, trainer loading) plus one rollout and one train step;
- wall_s: the whole command, teardown included.

Before the rounds each side runs once unmeasured (the tiny model built and cached, the files in
the page cache). Results: a table on stdout and the JSON file (--out): per fleet size the median
of each side and the after / before ratio of each round (both sides of a round ran back to back).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def one_start(checkout: Path, engines: int, run_dir: Path, timeout_s: float) -> dict[str, float]:
    """Run one launch to its end; the times of its first metrics row and its exit."""
    cmd = [sys.executable, "train.py", "--engines", str(engines), "--mode", "async", "--steps", "1",
           "--run-dir", str(run_dir), "--logging.live", "off", "--logging.tensorboard", "false"]
    metrics = run_dir / "metrics.jsonl"
    started = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first = None
    while proc.poll() is None:
        if first is None and metrics.exists() and metrics.read_text().strip():
            first = time.monotonic() - started
        if time.monotonic() - started > timeout_s:
            proc.kill()
            raise RuntimeError(f"{checkout}: no exit after {timeout_s:.0f}s")
        time.sleep(0.05)
    wall = time.monotonic() - started
    if proc.returncode != 0 or first is None:
        raise RuntimeError(f"{checkout} --engines {engines}: exit {proc.returncode}\n{proc.stderr.read()[-3000:]}")
    return {"first_step_s": first, "wall_s": wall}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the other checkout (a git worktree of the commit before)")
    ap.add_argument("--engines", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout-s", type=float, default=600)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "startup.json"))
    a = ap.parse_args()
    sides = {"before": Path(a.old).resolve(), "after": REPO}
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="tandem-startup-") as tmp:
        for side, checkout in sides.items():  # warm-up: model built, files cached
            one_start(checkout, 1, Path(tmp) / f"warm-{side}", a.timeout_s)
        for r in range(a.rounds):
            for n in a.engines:
                order = list(sides.items()) if r % 2 == 0 else list(sides.items())[::-1]
                for side, checkout in order:
                    times = one_start(checkout, n, Path(tmp) / f"r{r}-{n}-{side}", a.timeout_s)
                    runs.append({"round": r, "engines": n, "side": side, **times})
                    print(f"round {r} engines {n} {side:6s} first step {times['first_step_s']:6.1f} s "
                          f"(wall {times['wall_s']:.1f} s)", flush=True)
    summary = {}
    for n in a.engines:
        med = {side: statistics.median(x["first_step_s"] for x in runs if x["engines"] == n and x["side"] == side)
               for side in sides}
        spread = {side: [round(x["first_step_s"], 2) for x in runs if x["engines"] == n and x["side"] == side]
                  for side in sides}
        paired = [a / b for a, b in zip(spread["after"], spread["before"])]  # same round: same machine load
        summary[str(n)] = {"before_s": med["before"], "after_s": med["after"], "ratio": med["after"] / med["before"],
                           "paired_ratios": [round(x, 3) for x in paired], "paired_ratio_median": statistics.median(paired),
                           "before_runs": spread["before"], "after_runs": spread["after"]}
    print("\nengines | first step before (s) | after (s) | after / before (median) | per round")
    for n, row in summary.items():
        print(f"{n:>7} | {row['before_s']:8.1f} {row['before_runs']} | {row['after_s']:6.1f} {row['after_runs']} | "
              f"{row['paired_ratio_median']:.2f} | {row['paired_ratios']}")
    Path(a.out).write_text(json.dumps({"runs": runs, "summary": summary}, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
