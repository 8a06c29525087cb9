"""An outside harness in real runs (engine, router, trainer, rollout.harness):

- [eval]: the held-out rows are evaluated through the harness, beside training (async), at pinned
  weight versions; `tandem eval` on the finished run evaluates them through the same harness and,
  greedy, gives the run's own figures token for token;
- partial_rollout = "abort": harness calls in flight at a weight sync are aborted by the engine and
  their groups regenerated under the new weights, not counted as failures; no trained call spans two
  versions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from _faults import GROUP, PROMPTS, Launch, batch

REPO = Path(__file__).resolve().parents[1]
HARNESS = '''
async def run(client, row):
    """Two turns of its own history; the reward: the share of even characters in its last reply."""
    messages = [{"role": "user", "content": row["prompt"]}]
    first = await client.chat.completions.create(model="m", messages=messages, max_tokens=4)
    messages += [first.choices[0].message.model_dump(exclude_none=True), {"role": "user", "content": "again"}]
    second = await client.chat.completions.create(model="m", messages=messages)  # up to the run's max_new_tokens
    text = second.choices[0].message.content or ""
    return sum(1 for c in text if ord(c) % 2 == 0) / max(1, len(text))
'''
EVAL = ["--eval.enabled", "true", "--eval.holdout_fraction", "0.1", "--eval.max_prompts", "3", "--eval.every_k_steps",
        "1", "--eval.pass_reward", "0.5", "--sync.keep_last", "8", "--engines", "1"]
FIGURES = ("eval/reward_mean", "eval/pass@1", "eval/pass@k", "eval/response_len_mean", "eval/prompts",
           "eval/harness_calls_mean", "eval/harness_prefix_breaks")


def rows_of(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def small(tmp_path: Path) -> list[str]:
    (tmp_path / "agent.py").write_text(HARNESS)
    return ["--rollout.prompts_per_step", str(PROMPTS), "--rollout.samples_per_prompt", str(GROUP),
            "--logging.tensorboard", "false", "--logging.live", "off", "--engine.startup_timeout_s", "500",
            "--run.keep_rollouts", "all", "--rollout.harness", f"{tmp_path / 'agent.py'}:run",
            "--faults.engine_unresponsive_s", "120"]  # a box under heavy load must not restart a healthy engine


@pytest.mark.timeout(1800)  # two bounded stages (a run, then `tandem eval`), each starting its own engine
def test_held_out_rows_run_through_the_harness_in_the_run_and_in_tandem_eval(tmp_path):
    run = tmp_path / "run"
    launch = Launch(run, ["--steps", "2", "--mode", "async", "--rollout.sampling.max_new_tokens", "4", *EVAL,
                          *small(tmp_path)], tag="harness-eval")
    assert launch.wait(600) == 0, launch.describe()
    rows = rows_of(run / "eval.jsonl")
    assert [(r["step"], r["weight_version"]) for r in rows] == [(0, 0), (1, 1), (2, 2)], rows
    for row in rows:  # every held-out row through the harness: 2 calls each, on the version evaluated
        assert not row["cut_short"] and row["eval/errors"] == 0 and row["eval/prompts"] == 3, row
        assert row["eval/samples"] == 3 and row["eval/harness_calls_mean"] == 2.0, row
        held = json.loads((run / "eval" / f"step_{row['step']}.json").read_text())["samples"]
        calls = [c for s in held for c in s["metadata"]["harness"]["calls"]]
        assert len(calls) == 6 and {c["version"] for c in calls} == {row["weight_version"]}
        assert {v for s in held for v, m in zip(s["token_versions"], s["loss_mask"]) if m} == {row["weight_version"]}

    offline = subprocess.run([sys.executable, "-m", "tandem.cli", "eval", str(run), "--version", "0", "--version", "2"],
                             cwd=REPO, capture_output=True, text=True, timeout=900)
    assert offline.returncode == 0, offline.stderr[-3000:]
    again = {r["weight_version"]: r for r in rows_of(run / "eval_offline.jsonl")}
    for row in (rows[0], rows[2]):  # greedy: the same harness on the same weights answers the same
        assert {k: again[row["weight_version"]][k] for k in FIGURES} == {k: row[k] for k in FIGURES}, row["step"]
        answers = [s["response_ids"] for s in json.loads((run / "eval" / f"step_{row['step']}.json").read_text())["samples"]]
        offline_answers = json.loads((run / "eval_offline" / f"v{row['weight_version']}.json").read_text())["samples"]
        assert [s["response_ids"] for s in offline_answers] == answers, row["step"]


@pytest.mark.timeout(1000)  # the run is bounded at 900 s
def test_harness_calls_in_flight_at_a_sync_are_aborted_and_their_groups_regenerated(tmp_path):
    """As tests/test_launcher.py's abort run: steps 1 and 2 start together, so the first sync meets
    nothing in flight; step 3's groups start at the first sync, and their second calls of up to 256
    tokens (two seconds of decoding here; at 128 tokens a loaded box finished them before the sync in
    about one run of four) are still running when step 2, already rolled out, is
    trained and synced."""
    run = tmp_path / "run"
    launch = Launch(run, ["--steps", "4", "--engines", "1", "--mode", "async", "--rollout.oversample", "1.5",
                          "--rollout.staleness.partial_rollout", "abort", "--rollout.sampling.max_new_tokens", "256",
                          *small(tmp_path)], tag="harness-abort")
    assert launch.wait(900) == 0, launch.describe()
    steps = rows_of(run / "metrics.jsonl")
    assert [r["weight_version"] for r in steps] == [1, 2, 3, 4]
    assert sum(r["recycled_groups"] for r in steps) >= 1, [r["recycled_groups"] for r in steps]
    assert sum(r.get("rollout_errors", 0) for r in steps) == 0  # an aborted trajectory is no failure
    for step in range(1, 5):
        samples = batch(run, step)["samples"]
        assert len(samples) == PROMPTS * GROUP
        for s in samples:  # each trained call ran on one version, start to finish
            calls = s["metadata"]["harness"]["calls"]
            assert len(calls) == 2 and all(c["version"] == c["finished_on"] for c in calls), (step, calls)
            assert s["weight_version"] == min(c["version"] for c in calls)
