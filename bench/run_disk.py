"""What a run leaves on disk, per part of its run dir: this checkout against another.

    python bench/run_disk.py --old /path/to/old/checkout              # the default job, 200 steps
    python bench/run_disk.py --old ../before --steps 200 --out bench/results/run_disk.json

Runs the default job (`python train.py`, nothing else changed but the run dir) once per side and
adds up the bytes under each top-level entry of its run dir (hard links counted once: a
checkpoint's hf/ links the published weights). Per-step growth is the part that scales with
the steps (metrics, queue samples, TensorBoard, logs, and whatever per-step files are kept);
from it and the fixed part the JSON also gives the disk a 1,000-step run needs.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PER_STEP = ("metrics.jsonl", "queue.jsonl", "tensorboard", "logs", "autoscale.jsonl")
"""Entries that grow with the steps; rollouts/ and trainer/ too where they hold a file per step."""


def grows(run_dir: Path, name: str, steps: int) -> bool:
    if name in ("rollouts", "trainer"):
        return len(list((run_dir / name).glob("step_*.json"))) >= steps
    return name in PER_STEP


def usage(run_dir: Path) -> dict[str, int]:
    """Bytes per top-level entry of `run_dir`, each inode counted once across the whole dir."""
    seen: set[tuple[int, int]] = set()
    out: dict[str, int] = {}
    for entry in sorted(run_dir.iterdir()):
        total = 0
        for path in [entry, *entry.rglob("*")] if entry.is_dir() else [entry]:
            st = path.lstat()
            if path.is_file() and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
        out[entry.name] = total
    return out


def run(checkout: Path, run_dir: Path, steps: int) -> dict[str, int]:
    cmd = [sys.executable, "train.py", "--run-dir", str(run_dir), "--steps", str(steps), "--logging.live", "off"]
    done = subprocess.run(cmd, cwd=checkout, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"{checkout}: exit {done.returncode}\n{done.stderr[-3000:]}")
    return usage(run_dir)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--old", required=True, help="the other checkout")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--out", default=str(REPO / "bench" / "results" / "run_disk.json"))
    a = ap.parse_args()
    result = {}
    with tempfile.TemporaryDirectory(prefix="tandem-disk-", dir=os.environ.get("TMPDIR")) as tmp:
        for side, checkout in (("before", Path(a.old).resolve()), ("after", REPO)):
            run_dir = Path(tmp) / side
            parts = run(checkout, run_dir, a.steps)
            total = sum(parts.values())
            growing = sum(v for k, v in parts.items() if grows(run_dir, k, a.steps))
            per_step = growing / a.steps
            result[side] = {"parts": parts, "total_bytes": total, "per_step_bytes": per_step,
                            "projected_1000_steps_bytes": total - growing + per_step * 1000}
            print(f"{side:6s} total {total / 1e6:8.2f} MB  per step {per_step / 1e3:7.1f} kB  "
                  f"1,000 steps ~{result[side]['projected_1000_steps_bytes'] / 1e6:8.1f} MB  "
                  + "  ".join(f"{k} {v / 1e6:.2f}" for k, v in parts.items()), flush=True)
    Path(a.out).write_text(json.dumps({"steps": a.steps, **result}, indent=1))
    print(f"wrote {a.out}")


if __name__ == "__main__":
    main()
