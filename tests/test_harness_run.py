"""A harness as a program (rollout.harness_command): one real process per trajectory, the row on stdin,
OPENAI_BASE_URL / OPENAI_API_KEY in its environment, its reward as a JSON line; one that hangs, crashes
or prints garbage fails its trajectory with the reason, and the run goes on with the failure counted."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

from tandem.harness import HarnessFailed, HarnessRollout
from tandem.orchestrator.failures import FailureGuard
from tandem.orchestrator.producer import RolloutProducer
from tandem.rollout import PromptCursor
from tests._harness import ScriptedClient, harness_cfg, harness_ctx

REPO = Path(__file__).resolve().parents[1]
PROGRAM = '''
import json, os, subprocess, sys, time
row = json.load(sys.stdin)
mode = row["mode"]
if mode == "hang":  # a child that outlives its parent's death unless the group is killed (started
    # first, before the slow openai import and call: a loaded box must not time the program out before)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(240)"])
    open(row["pid_file"], "w").write(str(child.pid))
import openai
client = openai.OpenAI()  # OPENAI_BASE_URL / OPENAI_API_KEY from tandem
reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": row["prompt"]}])
text = reply.choices[0].message.content
if mode == "hang":
    time.sleep(300)
if mode == "crash":
    print("boom: the agent crashed", file=sys.stderr)
    sys.exit(3)
print("some log line")
if mode == "garbage":
    print("reward: high")
else:
    print(json.dumps({"reward": float(text == row["prompt"][::-1]), "info": {"text": text}}))
'''


@pytest.fixture()
def program(tmp_path):
    path = tmp_path / "agent.py"
    path.write_text(PROGRAM)
    return f"{sys.executable} {path}"


def rollout_rows(cfg, rows, engine=None, group=2, then=None):
    """The rows' groups, gathered; `then` (a coroutine function) runs before the event loop closes."""
    async def main():
        rollout = HarnessRollout.from_config(cfg)
        ctx = harness_ctx(cfg, engine or ScriptedClient(lambda prompt, n: "cba"))
        try:
            out = await asyncio.gather(*(rollout(ctx, row, group) for row in rows), return_exceptions=True)
            return out, (await then() if then else None)
        finally:
            await rollout.aclose()
    return asyncio.run(main())


def test_a_program_trains_on_its_calls_and_reports_its_reward(tmp_path, program):
    cfg = harness_cfg(tmp_path, harness_command=program, harness_timeout_s=120)
    [samples], _ = rollout_rows(cfg, [{"prompt": "abc", "mode": "ok"}])
    assert len(samples) == 2 and all(s.reward == 1.0 and s.reward_info["text"] == "cba" for s in samples)
    meta = samples[0].metadata["harness"]
    assert meta["exit_status"] == 0 and "some log line" in meta["stdout"] and meta["calls"][0]["kind"] == "chat"
    assert samples[0].loss_mask == [1] * 4 and samples[0].response_ids[-1] == 258  # "cba" + the eos


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_hang_crash_and_garbage_each_fail_with_their_reason_and_a_hung_programs_children_die(tmp_path, program):
    pid_file = tmp_path / "child.pid"
    # The hang's bound is 60 s; the others get 600 s, so a loaded box cannot time them out instead.
    hung_cfg = harness_cfg(tmp_path, harness_command=program, harness_timeout_s=60)
    cfg = harness_cfg(tmp_path, harness_command=program, harness_timeout_s=600)

    async def child_dies() -> bool:
        # Checked while the loop runs (closing it waits on the child's pipes), and before the child's
        # own 240 s sleep could have ended it: a trajectory that waited for its children is not bounded.
        child, born = int(pid_file.read_text()), pid_file.stat().st_mtime
        deadline = time.monotonic() + 30
        while pid_alive(child) and time.monotonic() < deadline:  # killed: gone once init reaps it
            await asyncio.sleep(0.1)
        return not pid_alive(child) and time.time() - born < 240

    (hang,), died = rollout_rows(hung_cfg, [{"prompt": "a", "mode": "hang", "pid_file": str(pid_file)}], group=1,
                                 then=child_dies)
    (crash, garbage), _ = rollout_rows(cfg, [{"prompt": "a", "mode": "crash"}, {"prompt": "a", "mode": "garbage"}],
                                       group=1)
    assert isinstance(hang, HarnessFailed) and str(hang).startswith(
        "timeout: the harness program ran past rollout.harness_timeout_s = 60s and was killed with its process group")
    assert died, "the hung program's child outlived it"
    assert isinstance(crash, HarnessFailed) and "exited with status 3" in str(crash) and "boom" in str(crash)
    assert isinstance(garbage, HarnessFailed) and str(garbage).startswith("garbage: the harness gave no reward")


def test_hung_crashed_and_garbage_trajectories_drop_their_groups_the_run_goes_on_and_the_bound_counts_them(
        tmp_path, program):
    """A step of 4 prompts x 1 sample over rows [hang, crash, garbage, ok, ok, ...]: the first four
    start together; crash and garbage fail and are replaced by ok rows, the hang is killed at
    rollout.harness_timeout_s and replaced too, so the step fills (from ok rows only) once all three
    have failed, and the failure guard counts each failed group as rollout errors, the first kept
    in failures.json. (No timing is assumed but that an ok program's one call ends within the bound.)"""
    cfg = harness_cfg(tmp_path, harness_command=program, harness_timeout_s=150, prompts_per_step=4,
                      samples_per_prompt=1)
    modes = ["hang", "crash", "garbage"] + ["ok"] * 5
    rows = [{"prompt": "abc", "mode": m, "pid_file": str(tmp_path / f"child{i}.pid"), "_index": i}
            for i, m in enumerate(modes)]

    async def main():
        rollout = HarnessRollout.from_config(cfg)
        producer = RolloutProducer(harness_ctx(cfg, ScriptedClient(lambda p, n: "cba")), rows,
                                   PromptCursor(len(rows), 0, False), rollout, start_step=0, total_steps=1,
                                   staleness=0, engine_version=0)
        try:
            producer.start()
            return await producer.take(0)
        finally:
            await producer.stop()
            await rollout.aclose()

    batch = asyncio.run(main())
    assert sorted(s.prompt_index for s in batch.samples) == [3, 4, 5, 6] and all(s.reward == 1.0 for s in batch.samples)
    reasons = sorted(g.error.split(":", 2)[1].strip() for g in batch.failed_groups)
    assert reasons == ["error", "garbage", "timeout"], [g.error for g in batch.failed_groups]
    guard = FailureGuard(tmp_path, max_fraction=0.5, window_steps=1, reward_spec="harness")
    counts = guard.observe(1, batch)
    assert counts.rollout_errors == 3 and counts.samples == 4 + 3
    kept = (tmp_path / "failures.json").read_text()
    assert "HarnessFailed: " in kept and any(w in kept for w in ("ran past", "exited with status 3", "gave no reward"))
