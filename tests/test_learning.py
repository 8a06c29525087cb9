"""The default job learns: `python train.py` as shipped (async, 2 engines, the echo task), cut to
100 steps, must lift the reward from its random start (~0.005) past LEVEL, averaged over steps
81-100, for each of two seeds.

Measured (this test, seeds 0 and 1): steps 81-100 averaged 0.537 and 0.539, steps 1-20 0.008
and 0.006. LEVEL is a fifth of that: a loop that silently stops learning (no advantages, no
weight sync, a broken loss) stays near 0.01; one that learns at all clears it on any seed measured.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
STEPS, WINDOW, LEVEL = 100, 20, 0.1


@pytest.mark.e2e
@pytest.mark.parametrize("seed", [0, 1])
def test_the_default_job_learns(tmp_path, seed):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "train.py", "--steps", str(STEPS), "--seed", str(seed), "--run-dir", str(run),
                           "--logging.live", "off", "--logging.tensorboard", "false"], cwd=REPO, capture_output=True,
                          text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    rewards = [json.loads(line)["reward_mean"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert len(rewards) == STEPS
    start, end = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    print(f"FIGURE learning[seed {seed}]: steps 1-{WINDOW} {start:.3f} -> steps {STEPS - WINDOW + 1}-{STEPS} {end:.3f}")
    assert end >= LEVEL and end > 5 * start, (start, end)
