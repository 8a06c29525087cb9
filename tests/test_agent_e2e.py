"""End to end: a scripted policy behind the real sglang-router drives the real agent loop.

A fake engine on a real loopback socket answers /generate in SGLang's format with token ids
of the tiny byte tokenizer; sglang-router 0.3.2 (a real process) routes to it; the agent
rollout runs every command in a real sandbox; the grader runs the hidden tests in a clean
copy. The correct fix, typed as bash commands, earns reward 1; a wrong fix earns 0. The
samples then go through the trainer's input path: the handoff file round trip, the
trainer's validation and collation into masked tensors.
"""

from __future__ import annotations

import asyncio

import torch

from tandem.rollout import EngineClient
from tandem.envs.coding import swe_agent_rollout
from tandem.envs.coding import agent_step_metrics
from tandem.envs.coding.grading import reset_runtime
from tandem.handoff import TrainBatch, wait_batch, write_batch
from tandem.trainer.torch_backend import collate, validate_samples
from tests._fakes import Router, ScriptedEngine, fake_logprob
from tests._swe import SENTINEL, bash, fix_command, make_cfg, make_ctx, row_named, tiny_tokenizer


def test_scripted_agent_through_router_sandbox_grader_and_trainer_input(tmp_path):
    good_row, bad_row = row_named("calendarx"), row_named("ledger")
    wrong_fix = "sed -i 's/cents <= 0/cents < 0/' ledger/account.py && git diff --stat"  # edits, but not the bug

    def policy(prompt: str, turn: int) -> str:
        fixing = "leap year" in prompt
        steps = [bash("ls && cat README.md"),
                 bash(fix_command(good_row) if fixing else wrong_fix, "Apply the fix."),
                 bash("python -c 'import calendarx, ledger' 2>&1 | tail -1; git status --short"),
                 bash(f"echo {SENTINEL}", "Done.")]
        return steps[min(max(turn, 1), len(steps)) - 1]

    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"pool_size": 4}, rollout={"samples_per_prompt": 2})
    tok = tiny_tokenizer()
    with ScriptedEngine(tok, policy, weight_version=3) as engine, \
            Router(engine.url, tmp_path / "router.log") as router:
        router.wait_routing(tok.encode("hi", add_special_tokens=False))
        n_probe = len(engine.requests)

        async def main():
            client = EngineClient(router.url, cfg.rollout.client.concurrency, 60)
            client.weight_version = 3  # what weight sync records once every engine serves version 3
            ctx = make_ctx(cfg, client)
            try:
                return await asyncio.gather(swe_agent_rollout(ctx, good_row, 2), swe_agent_rollout(ctx, bad_row, 2))
            finally:
                await client.close()
                ctx.executor.shutdown(wait=True)

        good, bad = asyncio.run(main())
        routed = engine.requests[n_probe:]
    reset_runtime()

    # rewards: 1 for the fix, 0 (with the reason) for the wrong edit
    assert [s.reward for s in good] == [1.0, 1.0], [s.reward_info for s in good]
    assert [s.reward for s in bad] == [0.0, 0.0]
    assert all(s.reward_info["reason"].startswith("tests failed") for s in bad)
    assert all(s.reward_info["tests"][t] == "FAILED" for s in bad for t in bad_row["FAIL_TO_PASS"])
    assert all(s.metadata["env"]["end_reason"] == "submitted" and s.metadata["env"]["turns"] == 4
               for s in good + bad)
    assert "+    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)" in good[0].metadata["diff"]

    # every generation went through the router, 4 turns x 4 episodes, with SGLang fields added
    assert len(routed) == 16 and all(r["sampling_params"]["max_new_tokens"] >= 1 for r in routed)
    # each episode named itself with one routing key on all of its turns (sticky sessions)
    keys = [r["routing_key"] for r in routed]
    assert None not in keys and len(set(keys)) == 4 and all(keys.count(k) == 4 for k in set(keys))

    # token bookkeeping survived HTTP + router: engine ids and logprobs verbatim, masks aligned
    samples = good + bad
    for s in samples:
        assert s.weight_version == 3
        assert len(s.response_ids) == len(s.loss_mask) == len(s.rollout_logprobs)
        pos = len(s.prompt_ids)
        for k, (tid, m, lp) in enumerate(zip(s.response_ids, s.loss_mask, s.rollout_logprobs)):
            assert lp == (fake_logprob(tid, pos + k) if m else 0.0)
        assert s.response_ids[-1] == tok.eos_token_id and s.loss_mask[-1] == 1

    # the trainer's input path: handoff file round trip, validation, collation
    for i, s in enumerate(samples):
        s.group_id = i // 2
    write_batch(tmp_path / "run", TrainBatch(0, samples))
    back = wait_batch(tmp_path / "run", 0, timeout_s=5).samples
    assert [b.to_dict() for b in back] == [s.to_dict() for s in samples]
    validate_samples(back)
    mb = collate(back, torch.device("cpu"), pad_id=tok.pad_token_id)
    for i, s in enumerate(back):
        p = len(s.prompt_ids)
        assert mb.mask[i].sum().item() == sum(s.loss_mask)
        model_pos = torch.nonzero(mb.mask[i]).flatten().tolist()
        assert [mb.targets[i, j].item() for j in model_pos] == [t for t, m in zip(s.response_ids, s.loss_mask) if m]
        assert model_pos[0] == p - 1

    # per-step agent metrics
    m = agent_step_metrics(samples)
    assert m["agent_pass_at_1"] == 0.5 and m["agent_pass_at_group"] == 0.5
    assert m["agent_end_submitted"] == 4 and m["agent_turns_mean"] == 4 and m["agent_format_error_rate"] == 0
    assert m["agent_commands"] == 16 and 0 < m["agent_exec_time_p50_s"] <= m["agent_exec_time_p95_s"]
    assert 0 < m["agent_masked_token_frac"] < 1 and m["agent_reward_time_mean_s"] > 0


def test_a_forging_policy_through_the_real_launcher_scores_zero_and_the_run_goes_on(tmp_path):
    """configs/coding_agent.toml through train.py: scripted engines (tests/_forging_run.py) forge on
    even-indexed tasks and fix odd ones; the router, trainer, agent loop, sandboxes and grader are real."""
    import json
    import subprocess
    import sys

    from tests._swe import REPO, bundled_rows

    run_dir = tmp_path / "run"
    args = [sys.executable, "-m", "tests._forging_run", "launch", "--config", "configs/coding_agent.toml",
            "--run-dir", str(run_dir), "--run.steps", "3", "--rollout.sampling.max_new_tokens", "1024",
            "--environment.max_context_tokens", "4000", "--logging.live", "off", "--engine.startup_timeout_s", "120"]
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # the run went on past the forgeries
    index = {r["instance_id"]: r["_index"] for r in bundled_rows()}
    forged = honest = 0
    for step in (1, 2, 3):
        samples = json.loads((run_dir / "rollouts" / f"step_{step:06d}.json").read_text())["samples"]
        for s in samples:
            if index[s["metadata"]["agent"]["instance_id"]] % 2:
                honest += 1
                assert s["reward"] == 1.0 and s["reward_info"]["tamper"] == [], s["reward_info"]
            else:
                forged += 1  # prevented (host-held checks); flagged where it left a trace (a raised test "passed")
                assert s["reward"] == 0.0, s["reward_info"]
        row = rows[step - 1]
        assert row["agent_tamper_rate"] == sum(bool(s["reward_info"]["tamper"]) for s in samples) / len(samples)
    assert forged and honest
    # every agent metric docs/coding-agent.md documents is in every row
    import re
    section = (REPO / "docs" / "coding-agent.md").read_text().split("### Metrics\n", 1)[1].split("\n## ", 1)[0]
    documented = {k for k in re.findall(r"`(agent_[a-z_0-9]+)`", section)}
    assert len(documented) >= 14 and all(documented <= set(r) for r in rows), documented - set(rows[0])
