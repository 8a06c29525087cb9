"""The step-time cost of in-run evaluation in async mode: the same job with evaluation on and off,
in interleaved pairs, in one invocation.

    python bench/eval_cost.py                         # the default echo job, 2 pairs, eval every 2 steps
    python bench/eval_cost.py --pairs 3 --every 1 --steps 20
    python bench/eval_cost.py --job configs/counter.toml --out bench/results/eval_cost_counter.json
    python bench/eval_cost.py --extra "--engine.startup_timeout_s 1200 --faults.engine_unresponsive_s 600"  # a crowded box

Each pair runs `train.py --mode async` twice with the same seed and settings, once with
`--eval.enabled false` and once with evaluation on held-out rows (`eval.holdout_fraction`,
`eval.max_prompts`, greedy, every `--every` steps); the order alternates from pair to pair
(off/on, on/off, ...), so load that drifts over the invocation hits both arms alike. From each
run's metrics.jsonl it reads the steps after the warm-up (the last step is dropped: it has no
next batch to overlap), and reports per arm:

- step_time mean and median over every measured step of the arm's runs (end of step to end of step);
- the ratio on/off of those, pooled and per pair;
- eval_wait_time: the seconds the loop waited on a running evaluation inside those steps (async: the
  weight sync waits for it, so it ends on its version), summed and per step;
- eval_time: each evaluation's own seconds (eval.jsonl), mean and total.

Start-up (engines, trainer, router) is excluded. The two arms train on the same rows except the
held-out ones (a few percent of the data), which the `on` arm removes from training.
Results: a table on stdout and bench/results/eval_cost.json (or --out).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import loadavg, tail_text  # bench/ is on the path

REPO = Path(__file__).resolve().parent.parent


def eval_args(a: argparse.Namespace) -> list[str]:
    return ["--eval.enabled", "true", "--eval.holdout_fraction", str(a.holdout), "--eval.max_prompts", str(a.prompts),
            "--eval.every_k_steps", str(a.every)]


def run_arm(arm: str, run_dir: Path, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(REPO / "train.py"), "--mode", "async", "--steps", str(a.steps), "--run-dir", str(run_dir),
           "--run.seed", str(a.seed), "--checkpoint.interval", "0", "--logging.tensorboard", "false",
           "--logging.live", "off", *(["--config", a.job] if a.job else []),
           *shlex.split(a.extra), *(eval_args(a) if arm == "on" else ["--eval.enabled", "false"])]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=a.timeout,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    metrics, evals = run_dir / "metrics.jsonl", run_dir / "eval.jsonl"
    rows = [json.loads(x) for x in metrics.read_text().splitlines()] if metrics.exists() else []
    if proc.returncode != 0 or len(rows) < a.steps:
        return {"error": f"train.py exit {proc.returncode}", "stderr_tail": tail_text(proc.stderr)}
    measured = rows[a.warmup:-1]
    eval_rows = [json.loads(x) for x in evals.read_text().splitlines()] if evals.exists() else []
    return {"step_time": [r["step_time"] for r in measured],
            "eval_wait_time": [r.get("eval_wait_time", 0.0) for r in measured],
            "eval_time": [r["eval_time"] for r in eval_rows],
            "eval_steps": [r["step"] for r in eval_rows],
            "cut_short": sum(bool(r.get("cut_short")) for r in eval_rows)}


def summarize(runs: list[dict]) -> dict:
    steps = [t for r in runs for t in r["step_time"]]
    waits = [t for r in runs for t in r["eval_wait_time"]]
    evals = [t for r in runs for t in r["eval_time"]]
    return {"steps": len(steps), "step_time_mean": statistics.fmean(steps), "step_time_median": statistics.median(steps),
            "eval_wait_time_total": sum(waits), "eval_wait_time_per_step": sum(waits) / len(waits),
            "evaluations": len(evals), "eval_time_mean": statistics.fmean(evals) if evals else 0.0,
            "eval_time_total": sum(evals), "cut_short": sum(r["cut_short"] for r in runs)}


def report(results: list[dict], a: argparse.Namespace) -> dict:
    ok = [r for r in results if "error" not in r]
    arms = {arm: summarize([r for r in ok if r["arm"] == arm]) for arm in ("off", "on")
            if any(r["arm"] == arm for r in ok)}
    pairs = []
    for pair in sorted({r["pair"] for r in ok}):
        both = {r["arm"]: r for r in ok if r["pair"] == pair}
        if len(both) == 2:
            off, on = summarize([both["off"]]), summarize([both["on"]])
            pairs.append({"pair": pair, "mean_ratio": on["step_time_mean"] / off["step_time_mean"],
                          "median_ratio": on["step_time_median"] / off["step_time_median"]})
    out = {"arms": arms, "pairs": pairs}
    if len(arms) == 2:
        out["mean_ratio"] = arms["on"]["step_time_mean"] / arms["off"]["step_time_mean"]
        out["median_ratio"] = arms["on"]["step_time_median"] / arms["off"]["step_time_median"]
    print(f"\nasync, {a.job or 'default echo job'}, eval every {a.every} step(s) on {a.prompts} held-out prompts "
          f"(greedy); steps {a.warmup}..{a.steps - 2} of each run")
    print(f"{'arm':<5}{'steps':>6}{'mean s':>9}{'median s':>10}{'wait/step':>11}{'evals':>7}{'eval_time':>11}")
    for arm, s in arms.items():
        print(f"{arm:<5}{s['steps']:>6}{s['step_time_mean']:>9.3f}{s['step_time_median']:>10.3f}"
              f"{s['eval_wait_time_per_step']:>11.3f}{s['evaluations']:>7}{s['eval_time_mean']:>11.2f}")
    if "mean_ratio" in out:
        print(f"on/off: mean {out['mean_ratio']:.3f}, median {out['median_ratio']:.3f}; per pair: "
              + ", ".join(f"{p['mean_ratio']:.3f}/{p['median_ratio']:.3f}" for p in pairs))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", default=None, help="a config file (default: the default echo job)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--every", type=int, default=2, help="eval.every_k_steps of the `on` arm")
    ap.add_argument("--prompts", type=int, default=16, help="eval.max_prompts of the `on` arm")
    ap.add_argument("--holdout", type=float, default=0.05, help="eval.holdout_fraction of the `on` arm")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--extra", default="", help="settings for both arms, e.g. a loaded box's "
                    "'--engine.startup_timeout_s 1200 --faults.engine_unresponsive_s 600'")
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "eval_cost.json"))
    a = ap.parse_args(argv)
    if a.warmup + 2 > a.steps:
        ap.error("--steps must leave measured steps after --warmup and the dropped last step")
    work = Path(tempfile.mkdtemp(prefix="tandem_eval_cost_"))
    results: list[dict] = []
    load_start = loadavg()
    try:
        for pair in range(a.pairs):
            for arm in ("off", "on") if pair % 2 == 0 else ("on", "off"):
                print(f"[pair {pair + 1}] eval {arm} ...", flush=True)
                res = run_arm(arm, work / f"{arm}_{pair}", a)
                results.append({"pair": pair + 1, "arm": arm, **res})
                if "error" in res:
                    print(f"FAILED: {res['error']}\n{res['stderr_tail']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    summary = report(results, a)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"job": a.job or "default", "mode": "async", "steps": a.steps, "warmup": a.warmup,
                                       "every_k_steps": a.every, "max_prompts": a.prompts, "holdout_fraction": a.holdout,
                                       "seed": a.seed, "extra": a.extra, "loadavg_start": load_start, "loadavg_end": loadavg(),
                                       **summary, "runs": results}, indent=1))
    print(f"results: {a.out}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
