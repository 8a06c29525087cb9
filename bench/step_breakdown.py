"""Where one step's time goes, for two builds of tandem (or two settings) side by side, interleaved.

    python bench/step_breakdown.py --old /path/to/old/checkout                 # this tree against another
    python bench/step_breakdown.py --variant "--rollout.client.group_request false"   # one setting against its default
    python bench/step_breakdown.py --size 23m --steps 12 --rounds 2

Each round runs `train.py` once per side (the sides alternate, so machine load drifts over both
alike) with the trl_compare shape (8 prompts x 4 samples x 32 tokens, 1 engine) and reads the
per-step metrics of the steps after the warm-up (the last step is dropped: it has no next batch
to overlap). It reports the median of each part of a step, per run:

- rollout: first group started -> last group finished (`rollout_time`)
- train:   the trainer's own train_step (`train_time`)
- publish: writing the weight version (`sync_time - reload_time`)
- reload:  engines loading it (`reload_time`)
- handoff: the rest of the trainer's turn: batch and answer files, polling, reading
           (`step_time - trainer_wait_time - train_time - publish`)
- step:    end of step to end of step (`step_time`)

Results: a table on stdout and bench/results/step_breakdown.json.
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

REPO = Path(__file__).resolve().parent.parent
SIZES = {
    "tiny": [],
    "23m": ["--model.tiny.hidden_size", "512", "--model.tiny.num_layers", "6", "--model.tiny.num_heads", "8",
            "--model.tiny.num_kv_heads", "4", "--model.tiny.head_dim", "64", "--model.tiny.intermediate_size", "2048"],
}
PARTS = ("step", "rollout", "train", "publish", "reload", "handoff")


def parts(row: dict) -> dict[str, float]:
    publish = row["sync_time"] - row["reload_time"]
    return {"step": row["step_time"], "rollout": row["rollout_time"], "train": row["train_time"],
            "publish": publish, "reload": row["reload_time"],
            "handoff": row["step_time"] - row["trainer_wait_time"] - row["train_time"] - publish}


def run_side(repo: Path, args: list[str], run_dir: Path, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, str(repo / "train.py"), "--mode", a.mode, "--engines", "1", "--steps", str(a.steps),
           "--run-dir", str(run_dir), "--rollout.prompts_per_step", "8", "--rollout.samples_per_prompt", "4",
           "--rollout.sampling.max_new_tokens", "32", "--rollout.sampling.temperature", "1.0", "--checkpoint.interval", "0",
           "--logging.tensorboard", "false", "--logging.live", "off", *SIZES[a.size], *args]
    # The old side runs its own package: PYTHONPATH puts its tree first, whatever is installed.
    proc = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, timeout=a.timeout,
                          env={**os.environ, "PYTHONPATH": str(repo)})
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()] \
        if (run_dir / "metrics.jsonl").exists() else []
    if proc.returncode != 0 or len(rows) < a.steps:
        return {"error": f"train.py exit {proc.returncode}", "stderr_tail": proc.stderr[-2000:]}
    measured = [parts(r) for r in rows[a.warmup:-1]]
    return {k: statistics.median(m[k] for m in measured) for k in PARTS}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--old", default=None, help="another checkout of tandem to compare against (the 'before')")
    ap.add_argument("--variant", default=None, help="config overrides for the second side, e.g. '--run.cpu_split even'")
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    ap.add_argument("--mode", choices=["sync", "async"], default="sync")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--timeout", type=float, default=1200.0)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "step_breakdown.json"))
    a = ap.parse_args(argv)
    if (a.old is None) == (a.variant is None):
        ap.error("give exactly one of --old and --variant")
    if a.warmup + 2 > a.steps:
        ap.error("--steps must leave measured steps after --warmup and the dropped last step")
    sides = [("before", Path(a.old).resolve(), []), ("after", REPO, [])] if a.old else \
        [("default", REPO, []), ("variant", REPO, shlex.split(a.variant))]
    work = Path(tempfile.mkdtemp(prefix="tandem_breakdown_"))
    results: list[dict] = []
    try:
        for rnd in range(a.rounds):
            for name, repo, extra in sides:
                print(f"[round {rnd + 1}] {name} ...", flush=True)
                res = run_side(repo, extra, work / f"{name}_{rnd}", a)
                results.append({"round": rnd + 1, "side": name, "repo": str(repo), "args": extra, **res})
                if "error" in res:
                    print(f"FAILED: {res['error']}\n{res['stderr_tail']}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{a.size}, {a.mode}, median seconds over steps {a.warmup}..{a.steps - 2} of each run")
    print(f"{'round':<6}{'side':<9}" + "".join(f"{p:>10}" for p in PARTS))
    for r in results:
        if "error" not in r:
            print(f"{r['round']:<6}{r['side']:<9}" + "".join(f"{r[p]:>10.4f}" for p in PARTS))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({"size": a.size, "mode": a.mode, "steps": a.steps, "warmup": a.warmup,
                                       "results": results}, indent=1))
    print(f"results: {a.out}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
