"""How small delta weight versions are when tandem trains a bf16 model of ~100M parameters.

    python bench/delta_sync.py                          # lr 1e-6 and 1e-5, 6 steps each
    python bench/delta_sync.py --lrs 1e-6 --steps 10

Each learning rate is one real run of `train.py` (two embedded engines, the torch trainer with
fp32 master weights exporting bf16, `sync.encoding = "delta"`, no anchor after the first
version) on a locally built Qwen3-architecture model: hidden 768, 12 layers, 12 heads / 4 KV
heads of 64, MLP 3072 (~103M parameters, ~206 MB in bf16). Every version after the first is a
delta; its size is reported against the full version the same run published first (the
baseline), with the changed-element fraction the trainer measured. Results:
bench/results/delta_sync.md and .json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODEL = ["--model.tiny.hidden_size", "768", "--model.tiny.num_layers", "12", "--model.tiny.num_heads", "12",
         "--model.tiny.num_kv_heads", "4", "--model.tiny.head_dim", "64", "--model.tiny.intermediate_size", "3072"]


def run_one(lr: str, steps: int, run_dir: Path) -> list[dict]:
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = [sys.executable, "train.py", "--run.run_dir", str(run_dir), "--run.cache_dir", str(REPO / ".cache/tandem"),
           "--run.steps", str(steps), "--trainer.lr", lr, "--model.dtype", "bfloat16",
           "--sync.encoding", "delta", "--sync.anchor_interval", "1000", "--checkpoint.interval", "0",
           "--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "8",
           "--trainer.micro_batch_size", "8", "--logging.live", "off", "--logging.tensorboard", "false", *MODEL]
    started = time.perf_counter()
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"lr {lr}: train.py failed\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}")
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    full = rows[0]["publish_bytes"]
    out = [{"lr": lr, "version": r["weight_version"], "bytes": r["publish_bytes"], "full_bytes": full,
            "ratio": r["publish_bytes"] / full, "changed_fraction": r["changed_fraction"],
            "encode_s": r["encode_time"], "apply_s": r["apply_time"], "reload_s": r["reload_time"]} for r in rows]
    for r in out:
        print(f"lr {lr} v{r['version']}: {r['bytes'] / 1e6:7.2f} MB ({r['ratio'] * 100:5.2f}% of full), "
              f"changed {r['changed_fraction'] * 100:5.2f}%, encode {r['encode_s']:.2f}s, apply {r['apply_s']:.2f}s",
              flush=True)
    print(f"lr {lr}: run took {time.perf_counter() - started:.0f}s", flush=True)
    return out


def summarize(rows: list[dict]) -> list[str]:
    lines = ["# Delta weight versions, ~103M-parameter bf16 model trained by tandem", "",
             "| lr | full version MB | delta versions | changed elements % (mean, min-max) | "
             "delta / full % (mean, min-max) | encode s (mean) | apply s (mean) |", "|---|---|---|---|---|---|---|"]
    for lr in dict.fromkeys(r["lr"] for r in rows):
        deltas = [r for r in rows if r["lr"] == lr and r["version"] > 1]
        changed = [100 * r["changed_fraction"] for r in deltas]
        ratio = [100 * r["ratio"] for r in deltas]
        lines.append(f"| {lr} | {deltas[0]['full_bytes'] / 1e6:.1f} | {len(deltas)} | "
                     f"{statistics.fmean(changed):.2f} ({min(changed):.2f}-{max(changed):.2f}) | "
                     f"{statistics.fmean(ratio):.2f} ({min(ratio):.2f}-{max(ratio):.2f}) | "
                     f"{statistics.fmean(r['encode_s'] for r in deltas):.2f} | "
                     f"{statistics.fmean(r['apply_s'] for r in deltas):.2f} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lrs", nargs="+", default=["1e-6", "1e-5"])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--dir", default=str(REPO / "runs/bench_delta"))
    ap.add_argument("--out", default=str(REPO / "bench/results"))
    args = ap.parse_args(argv)
    rows = [r for lr in args.lrs for r in run_one(lr, args.steps, Path(args.dir) / f"lr{lr}")]
    lines = summarize(rows)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "delta_sync.md").write_text("\n".join(lines) + "\n")
    (out / "delta_sync.json").write_text(json.dumps(rows, indent=1))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
