"""run.reproducible end to end: one seed, run twice, the second time beside a CPU hog (one busy
process per core), writes the same metrics rows except the times and the queue's momentary state
(tandem.orchestrator.reproducibility), and publishes bit-identical weights. Two jobs: the default
echo job (one batched request per group, split into seeded single requests) and the counter
environment (multi-turn episodes, one seed per episode and turn)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tandem.orchestrator.reproducibility import row_differences

REPO = Path(__file__).resolve().parents[1]
STEPS = 5
SMALL = ["--rollout.prompts_per_step", "4", "--rollout.samples_per_prompt", "8"]


def run(run_dir: Path, job: list[str]) -> list[dict]:
    done = subprocess.run([sys.executable, "train.py", *job, *SMALL, "--steps", str(STEPS), "--seed", "3",
                           "--run.reproducible", "true", "--run-dir", str(run_dir), "--logging.live", "off",
                           "--logging.tensorboard", "false"], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def model_hash(run_dir: Path) -> str:
    newest = max((run_dir / "weights").iterdir(), key=lambda p: p.name)
    return json.loads((newest / "manifest.json").read_text())["files"]["model.safetensors"]["xxh3_128"]


@pytest.mark.e2e
@pytest.mark.parametrize("job", [[], ["--config", "configs/counter.toml"]], ids=["echo", "counter"])
def test_one_seed_gives_the_same_rows_beside_a_cpu_hog(tmp_path, job):
    quiet = run(tmp_path / "quiet", job)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        loaded = run(tmp_path / "loaded", job)
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert len(quiet) == STEPS
    assert row_differences(quiet, loaded) == []
    assert [r["weight_version"] for r in quiet] == list(range(1, STEPS + 1))
    assert all(r["staleness_max"] == min(r["step"] - 1, 1) for r in quiet)  # step k trains version k-1's samples
    assert model_hash(tmp_path / "quiet") == model_hash(tmp_path / "loaded")
    print(f"FIGURE reproducible[{job or 'echo'}]: rewards {[round(r['reward_mean'], 4) for r in quiet]}, "
          f"step_time quiet {sum(r['step_time'] for r in quiet):.1f} s vs loaded {sum(r['step_time'] for r in loaded):.1f} s")
