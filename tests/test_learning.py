"""The default job learns: `python train.py` as shipped (async, 2 engines, the echo task), cut to
100 steps, must lift the reward from its random start (~0.005) past LEVEL, averaged over steps
81-100, for each of two seeds; the second seed runs it colocated (`--run.colocate true --mode
sync`: engines and trainer hand their memory back and forth every step), which must learn as well.

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
@pytest.mark.parametrize("seed, layout", [(0, []), (1, ["--run.colocate", "true", "--mode", "sync"])],
                         ids=["async", "colocated"])
def test_the_default_job_learns(tmp_path, seed, layout):
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "train.py", "--steps", str(STEPS), "--seed", str(seed), "--run-dir", str(run),
                           "--logging.live", "off", "--logging.tensorboard", "false", *layout], cwd=REPO,
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rewards = [r["reward_mean"] for r in rows]
    assert len(rewards) == STEPS
    start, end = sum(rewards[:WINDOW]) / WINDOW, sum(rewards[-WINDOW:]) / WINDOW
    print(f"FIGURE learning[seed {seed} {layout}]: steps 1-{WINDOW} {start:.3f} -> steps {STEPS - WINDOW + 1}-{STEPS} "
          f"{end:.3f}")
    assert end >= LEVEL and end > 5 * start, (start, end)
    if layout:  # every step handed the engines' memory over
        assert all(r["handover_release_time"] > 0 and "engine_memory_released_mb" in r for r in rows)
