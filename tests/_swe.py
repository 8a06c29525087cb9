"""Shared set-up for the coding-agent tests: configs, the tiny tokenizer, scripted policies."""

from __future__ import annotations

import functools
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from tandem.config import TandemConfig
from tandem.envs.coding.swe_data import BUNDLED_TASKS, read_rows, task_from_row

REPO = Path(__file__).resolve().parents[1]
SENTINEL = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT"


def _own_uids() -> dict:
    """A bench run beside the test suite takes other sandbox uids (TANDEM_TEST_BASE_UID): each slot's uid carries a
    process limit (RLIMIT_NPROC counts every process of the uid), which two runs on one uid range would share."""
    base = os.environ.get("TANDEM_TEST_BASE_UID")
    return {"base_uid": int(base)} if base else {}


def make_cfg(tmp_path: Path, *, sandbox: dict | None = None, agent: dict | None = None, **sections: dict) -> TandemConfig:
    """A small, fast config: bundled tasks, tight sandbox limits, short timeouts. `sandbox` and
    `agent` update the coding environment's arguments, the other keywords whole sections."""
    tree: dict[str, Any] = {
        "run": {"run_dir": str(tmp_path / "run"), "cache_dir": str(REPO / ".cache" / "tandem")},
        "data": {"path": str(BUNDLED_TASKS)},
        "rollout": {"prompts_per_step": 1, "samples_per_prompt": 2, "reward_timeout_s": 120,
                    "sampling": {"max_new_tokens": 4096}, "client": {"concurrency": 8}},
        "environment": {"max_turns": 6, "max_context_tokens": 16384, "wall_time_s": 120, "args": {
            "agent": {"output_max_chars": 1000, **(agent or {})},
            "sandbox": {"pool_size": 2, "command_timeout_s": 10, "test_timeout_s": 60, "cpu_time_s": 20,
                        "memory_mb": 1024, "max_processes": 48, "max_workdir_mb": 64, **_own_uids(),
                        **(sandbox or {})}}},
    }
    for name, values in sections.items():
        tree.setdefault(name, {}).update(values)
    return TandemConfig.model_validate(tree)


@functools.lru_cache(maxsize=1)
def tiny_tokenizer():
    from tandem.model_source import load_tokenizer, resolve_model_path

    return load_tokenizer(resolve_model_path(TandemConfig.model_validate(
        {"run": {"cache_dir": str(REPO / ".cache" / "tandem")}})))


def bundled_rows() -> list[dict]:
    return [{**r, "_index": i} for i, r in enumerate(read_rows(BUNDLED_TASKS))]


def row_named(name: str) -> dict:
    return next(r for r in bundled_rows() if r["repo"] == f"tandem/{name}")


def bash(command: str, thought: str = "Next step.") -> str:
    """A well-formed agent reply: a thought and exactly one bash block."""
    return f"THOUGHT: {thought}\n\n```bash\n{command}\n```"


def fix_command(row: dict) -> str:
    """Bash that fixes the task: write the bug patch to a file and apply it in reverse."""
    patch = task_from_row(row).patch
    return f"cat > /tmp/bug.diff <<'TANDEM_EOF'\n{patch}TANDEM_EOF\ngit apply -R /tmp/bug.diff && git status --short"


def scripted(*replies: str):
    """A policy that answers turn k with replies[k-1] (and submits when the script runs out)."""
    def policy(prompt: str, turn: int) -> str:
        if 1 <= turn <= len(replies):
            return replies[turn - 1]
        return bash(f"echo {SENTINEL}")
    return policy


class InProcessEngine:
    """The ScriptedEngine's /generate without HTTP, for fast loop tests (the e2e test uses HTTP + router)."""

    def __init__(self, tokenizer, policy, delay_s: float = 0.0):
        from tests._fakes import ScriptedEngine

        self._engine = ScriptedEngine(tokenizer, policy)
        self.delay_s = delay_s
        self.calls: list[dict] = []

    @property
    def requests(self):
        return self._engine.requests

    async def generate(self, input_ids, sampling_params, return_logprob: bool = True,
                       routing_key: str | None = None) -> dict:
        import asyncio

        self.calls.append({"routing_key": routing_key, "input_len": len(input_ids)})
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        return self._engine.generate({"input_ids": list(input_ids), "sampling_params": dict(sampling_params)})


def make_ctx(cfg: TandemConfig, engine, reward_fn=None):
    """The lead's real RolloutContext around a given engine client."""
    from tandem.rollout import RolloutContext, sampling_params_from_config
    from tandem.envs.coding.grading import swe_reward

    executor = ThreadPoolExecutor(max_workers=cfg.rollout.client.concurrency + 16, thread_name_prefix="rollout")
    return RolloutContext(cfg, tiny_tokenizer(), engine, executor, reward_fn or swe_reward,
                          sampling_params_from_config(cfg))


def run_rollout(cfg: TandemConfig, policy, row: dict):
    """One agent episode (G = 1) on `row` through the real rollout plug-in, sandbox and grader."""
    import asyncio

    from tandem.envs.coding import swe_agent_rollout

    ctx = make_ctx(cfg, InProcessEngine(tiny_tokenizer(), policy))
    try:
        return asyncio.run(swe_agent_rollout(ctx, row, 1))[0]
    finally:
        ctx.executor.shutdown(wait=True)


PATCH_REPORTS_CODE = """
from _pytest import reports as _r

_orig = _r.TestReport.from_item_and_call.__func__


def _forged(cls, item, call):
    rep = _orig(cls, item, call)
    rep.outcome, rep.longrepr = "passed", None
    return rep


_r.TestReport.from_item_and_call = classmethod(_forged)
"""
"""A forgery: imported by the tests, it rewrites pytest's reports so that every phase of every test passed."""


def write_file(path: str, text: str) -> str:
    """Bash that writes `text` to `path` (inside the agent's /testbed)."""
    import textwrap

    return f"mkdir -p $(dirname {path}) && cat > {path} <<'TANDEM_EOF'\n{textwrap.dedent(text).lstrip()}TANDEM_EOF\n"


def sandbox_backends():
    """(backends that work here, pytest params for both): a backend that cannot run is a recorded skip."""
    import pytest

    from tandem.envs.coding.sandbox.isolation import _probe

    available = [b for b in ("bwrap", "unshare") if _probe(b)]
    params = [pytest.param(b, id=b, marks=[] if b in available else pytest.mark.skip(
        reason=f"the {b} sandbox backend cannot create namespaces here")) for b in ("bwrap", "unshare")]
    return available, params


def bash_episode(policy, execute, *, engine=None, delay_s: float = 0.0, disk=None, max_new: int = 4096,
                 agent=None, **limits):
    """One coding-agent episode (BashAgentEnv on the shared loop) with a scripted shell, no sandbox:
    (episode, env, engine)."""
    import asyncio

    from tandem.envs.coding import BashAgentEnv
    from tandem.config import EnvironmentConfig
    from tandem.envs.coding.settings import AgentSettings
    from tandem.env import ChatFormat, parse_hermes, run_episode

    tok = tiny_tokenizer()
    engine = engine or InProcessEngine(tok, policy, delay_s)
    env = BashAgentEnv(execute=execute, agent=agent or AgentSettings(), command_timeout_s=5, disk_exceeded=disk)
    limits = EnvironmentConfig(**{"max_turns": 5, "max_context_tokens": 4096, **limits})
    episode = asyncio.run(run_episode(env, {"problem_statement": "Fix the bug."}, engine=engine,
                                      chat=ChatFormat(tok), parse=parse_hermes, limits=limits,
                                      sampling_params={"temperature": 1.0, "max_new_tokens": max_new}))
    return episode, env, engine
