"""The agent loop: format errors, output truncation, and every way an episode ends."""

from __future__ import annotations

import asyncio
import time

import pytest

from tandem.envs.coding import is_submission, parse_actions
from tandem.envs.coding.settings import AgentSettings
from tandem.envs.coding.sandbox.runner import ExecResult
from tests._swe import SENTINEL, InProcessEngine, bash, bash_episode, scripted, tiny_tokenizer

REGEX = AgentSettings().action_regex


class Shell:
    def __init__(self, handler=None):
        self.commands: list[str] = []
        self.handler = handler or (lambda c: (f"ran {c}\n", 0))

    async def __call__(self, command: str, timeout: float) -> ExecResult:
        self.commands.append(command)
        if command == f"echo {SENTINEL}":
            out, rc = f"{SENTINEL}\n", 0
        else:
            out, rc = self.handler(command)
        return ExecResult(out, rc, False, 0.001, len(out))


def episode(policy, shell=None, delay_s=0.0, disk=None, output_max_chars=None, **limits):
    shell = shell or Shell()
    agent = AgentSettings(**({"output_max_chars": output_max_chars} if output_max_chars else {}))
    ep, env, _ = bash_episode(policy, shell, delay_s=delay_s, disk=disk, agent=agent, **{"max_turns": 6, **limits})
    ep.env = env
    return ep, shell


# ----------------------------------------------------------------------------- parsing
def test_parse_actions_exactly_like_mini_swe_agent():
    assert parse_actions("x\n```bash\nls -la\n```\n", REGEX) == ["ls -la"]
    assert parse_actions("no block here", REGEX) == []
    assert parse_actions("```bash\nls\n```\n```bash\npwd\n```", REGEX) == ["ls", "pwd"]
    assert parse_actions("```python\nprint(1)\n```", REGEX) == []
    assert parse_actions("```bash\ncat <<'EOF' > f\na\nb\nEOF\n```", REGEX) == ["cat <<'EOF' > f\na\nb\nEOF"]


def test_submission_needs_sentinel_first_and_success():
    ok = ExecResult(f"\n  {SENTINEL}\nextra", 0, False, 0, 0)
    assert is_submission(ok, SENTINEL)
    assert not is_submission(ExecResult(f"{SENTINEL}\n", 1, False, 0, 0), SENTINEL)
    assert not is_submission(ExecResult(f"hello\n{SENTINEL}\n", 0, False, 0, 0), SENTINEL)


# ----------------------------------------------------------------------------- format errors
def test_zero_and_two_blocks_are_format_errors_that_use_a_turn():
    ep, shell = episode(scripted("I will just think.", bash("ls") + "\n" + bash("pwd"), bash("ls")))
    assert ep.end_reason == "submitted"
    assert [c.n_actions for c in ep.env.commands] == [0, 2, 1, 1] and len(ep.turns) == 4
    assert shell.commands == ["ls", f"echo {SENTINEL}"]  # nothing ran for the malformed replies
    err0, err2 = ep.messages[3]["content"], ep.messages[5]["content"]
    assert "found 0" in err0 and "found 2" in err2 and SENTINEL in err0
    assert ep.env._command_summary()["format_errors"] == 2 and ep.summary()["turns"] == 4


# ----------------------------------------------------------------------------- truncation
def test_long_output_is_cut_to_head_and_tail():
    big = "".join(f"{i:06d}\n" for i in range(4000))  # 28000 chars
    ep, _ = episode(scripted(bash("cat big.txt")), Shell(lambda c: (big, 0)), output_max_chars=1000)
    obs = ep.messages[3]["content"]
    assert obs.startswith("<returncode>0</returncode>\n<warning>")
    assert f"<output_head>\n{big[:500]}\n</output_head>" in obs
    assert f"<output_tail>\n{big[-500:]}\n</output_tail>" in obs
    assert f"{len(big) - 1000} characters elided" in obs
    assert len(obs) < 1500


def test_short_output_is_shown_whole_with_returncode():
    ep, _ = episode(scripted(bash("false")), Shell(lambda c: ("boom\n", 2)))
    assert ep.messages[3]["content"] == "<returncode>2</returncode>\n<output>\nboom\n</output>"


def test_timed_out_command_is_reported():
    class Slow(Shell):
        async def __call__(self, command, timeout):
            if command == "sleep 99":
                return ExecResult("partial\n", -9, True, timeout, 8)
            return await super().__call__(command, timeout)

    ep, _ = episode(scripted(bash("sleep 99")), Slow())
    obs = ep.messages[3]["content"]
    assert obs.startswith("<exception>The command timed out") and "<returncode>-9</returncode>" in obs
    assert ep.end_reason == "submitted"  # the run goes on after a timeout


# ----------------------------------------------------------------------------- end reasons
def test_end_submitted():
    ep, _ = episode(scripted(bash("ls")))
    assert ep.end_reason == "submitted" and len(ep.turns) == 2
    assert ep.sample.finish_reason == "submitted"


def test_end_turn_limit_without_a_dangling_observation():
    ep, shell = episode(lambda p, t: bash("ls"), max_turns=3)
    assert ep.end_reason == "turn_limit" and len(ep.turns) == 3 and len(shell.commands) == 3
    # the trajectory ends with the last model turn: no observation appended after it
    assert ep.sample.loss_mask[-1] == 1 and ep.sample.response_ids[-1] == tiny_tokenizer().eos_token_id


def test_end_context_limit_never_exceeds_the_budget():
    tok = tiny_tokenizer()
    first, _ = episode(scripted(bash("ls")), max_turns=1)
    budget = len(first.sample.tokens) + 40  # room for turn 1, not for its observation + another turn
    ep, _ = episode(lambda p, t: bash("ls"), max_context_tokens=budget)
    assert ep.end_reason == "context_limit" and len(ep.turns) == 1
    assert len(ep.sample.tokens) <= budget and ep.sample.finish_reason == "length"
    assert ep.sample.response_ids[-1] == tok.eos_token_id


def test_end_context_limit_caps_max_new_tokens():
    probe, _ = episode(scripted(bash("ls")), max_turns=1)
    prompt_len = len(probe.sample.prompt_ids)
    ep, _ = episode(lambda p, t: bash("x" * 500), max_context_tokens=prompt_len + 30, min_turn_tokens=8)
    assert ep.end_reason == "context_limit"
    assert len(ep.sample.tokens) == prompt_len + 30  # the engine was told to stop exactly at the budget


def test_end_wall_clock():
    start = time.monotonic()
    ep, _ = episode(lambda p, t: bash("ls"), delay_s=0.4, wall_time_s=1.0, max_turns=50)
    assert ep.end_reason == "wall_clock"
    assert 1 <= len(ep.turns) <= 3
    assert time.monotonic() - start < 50 * 0.4, "ended by the wall clock, long before its 50 turns of 0.4 s"


def test_end_disk_limit():
    async def full():
        return True

    ep, _ = episode(scripted(bash("head -c 100M /dev/zero > big")), disk=full)
    assert ep.end_reason == "disk_limit" and len(ep.turns) == 1


# ----------------------------------------------------------------------------- the plug-in around the loop
def test_abort_for_a_weight_update_cancels_the_group_and_frees_its_sandboxes(tmp_path):
    from tandem.rollout import RolloutAborted
    from tandem.envs.coding import swe_agent_rollout
    from tandem.envs.coding.grading import get_runtime, reset_runtime
    from tests._swe import make_cfg, make_ctx, row_named

    class Aborting(InProcessEngine):
        async def generate(self, input_ids, sampling_params, return_logprob=True, routing_key=None):
            if len(self.requests) >= 3:  # a weight update aborts in-flight requests
                raise RolloutAborted("aborted by engine")
            return await super().generate(input_ids, sampling_params, routing_key=routing_key)

    reset_runtime()
    cfg = make_cfg(tmp_path, sandbox={"pool_size": 2})
    ctx = make_ctx(cfg, Aborting(tiny_tokenizer(), lambda p, t: bash("sleep 0.2")))
    try:
        with pytest.raises(RolloutAborted):
            asyncio.run(swe_agent_rollout(ctx, row_named("radix"), 2))
        ctx.executor.shutdown(wait=True)
        pool = get_runtime().agent_pool
        assert len(pool._free) == pool.size  # both slots are back
        assert not any((slot.dir / "testbed").exists() for slot in pool._free)  # and wiped
    finally:
        reset_runtime()
