"""Held-out evaluation end to end: a real run (engine, router, trainer) evaluates its held-out prompts
at pinned weight versions, a resume re-fires the evaluation due at its checkpoint (none lost, none
doubled), and `tandem eval` on the finished run gives the run's own greedy figures exactly.

The reward is tests/_faults.py's parity reward (the share of even token ids), so the greedy
figures are not all zeros; `tandem eval` must match the run's answers token for token."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from _faults import SMALL, Launch

REPO = Path(__file__).resolve().parents[1]
EVAL = ["--eval.enabled", "true", "--eval.holdout_fraction", "0.1", "--eval.max_prompts", "4", "--eval.every_k_steps",
        "1", "--eval.pass_reward", "0.5", "--checkpoint.interval", "1", "--sync.keep_last", "8", "--engines", "1"]
FIGURES = ("eval/reward_mean", "eval/pass@1", "eval/pass@k", "eval/response_len_mean", "eval/prompts")


def eval_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_resume_refires_the_due_evaluation_and_tandem_eval_agrees(tmp_path):
    run = tmp_path / "run"
    first = Launch(run, ["--steps", "2", "--mode", "sync", *EVAL, *SMALL], tag="first")
    assert first.wait(400) == 0, first.describe()
    before = eval_rows(run / "eval.jsonl")
    assert [(r["step"], r["weight_version"]) for r in before] == [(0, 0), (1, 1), (2, 2)], before
    assert all(not r["cut_short"] and r["eval/prompts"] == 4 and r["eval/samples"] == 4 for r in before)
    assert "eval step 2 (weights v2): eval/reward_mean=" in first.stdout
    held = json.loads((run / "eval" / "step_2.json").read_text())
    assert held["weight_version"] == 2 and len(held["samples"]) == 4
    trained = {s["prompt_index"] for p in (run / "rollouts").glob("step_*.json")
               for s in json.loads(p.read_text())["samples"]}
    assert not trained & {s["prompt_index"] for s in held["samples"]}, "a held-out prompt was trained on"

    resumed = Launch(run, ["--steps", "3", "--mode", "async"], resume=True, tag="resume")
    assert resumed.wait(400) == 0, resumed.describe()
    after = eval_rows(run / "eval.jsonl")
    # step 2 is the checkpoint the resume starts from: evaluated again (its row replaced), then step 3
    assert [r["step"] for r in after] == [0, 1, 2, 3], after
    assert after[:2] == before[:2]
    assert {k: after[2][k] for k in FIGURES} == {k: before[2][k] for k in FIGURES}  # greedy: the same weights
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in steps] == [1, 2, 3] and all("alarm/kl_spike" in r and r["eval_wait_time"] >= 0
                                                           for r in steps)

    offline = subprocess.run([sys.executable, "-m", "tandem.cli", "eval", str(run), "--all"], cwd=REPO,
                             capture_output=True, text=True, timeout=400)
    assert offline.returncode == 0, offline.stderr[-3000:]
    again = {r["weight_version"]: r for r in eval_rows(run / "eval_offline.jsonl")}
    assert sorted(again) == [0, 1, 2, 3]
    for row in after:
        assert {k: again[row["weight_version"]][k] for k in FIGURES} == {k: row[k] for k in FIGURES}, row["step"]
        answers = [s["response_ids"] for s in json.loads((run / "eval" / f"step_{row['step']}.json").read_text())["samples"]]
        offline_answers = json.loads((run / "eval_offline" / f"v{row['weight_version']}.json").read_text())["samples"]
        assert [s["response_ids"] for s in offline_answers] == answers, row["step"]  # token for token
