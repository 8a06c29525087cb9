"""The coding agent as an environment: environment.name = "tandem.envs.coding:CodingEnv".

Per episode: check the task's repository out once per task (a template, with retries), take a
sandbox slot from the warm pool, run mini-swe-agent-style bash turns in it (BashAgentEnv), take
the diff on the host, release the slot, and grade the diff with the hidden tests in a fresh
clean copy (tandem.envs.coding.grading.swe_reward). Nothing the agent prints or writes is read as the
reward: only the diff, replayed where the agent never ran. Blocking work runs on ctx.executor
(sized to rollout concurrency), never on the event loop.
"""

from __future__ import annotations

import asyncio
import statistics
from typing import Any

from tandem.envs.coding.bash_env import BashAgentEnv
from tandem.envs.coding.prompts import Prompts
from tandem.env.env_rollout import EnvRollout
from tandem.envs.coding.grading import SweRuntime, get_runtime, swe_reward
from tandem.rollout.context import RolloutContext
from tandem.rollout.plugins import RewardResult
from tandem.sample import Sample
from tandem.envs.coding.sandbox.pool import Sandbox
from tandem.envs.coding.sandbox import SandboxUnavailable, detect_backend
from tandem.envs.coding.settings import CodingArgs, coding_args, pytest_problems

MAX_DIFF_BYTES = 2_000_000
"""A larger diff is not graded (reason recorded): it would bloat the handoff file and is never a bug fix."""

_PROMPTS: dict[str, Prompts] = {}


def _prompts(path: str) -> Prompts:
    if path not in _PROMPTS:
        _PROMPTS[path] = Prompts.load(path)
    return _PROMPTS[path]


async def _acquire(ctx, runtime: SweRuntime, template) -> Sandbox:
    loop = asyncio.get_running_loop()
    fut = loop.run_in_executor(ctx.executor, runtime.agent_pool.acquire, template)
    try:
        return await asyncio.shield(fut)
    except asyncio.CancelledError:
        # The thread still gets its slot; hand it back as soon as it does.
        fut.add_done_callback(lambda f: f.cancelled() or f.exception() or ctx.executor.submit(f.result().close))
        raise


class CodingEnv(BashAgentEnv):
    """A SWE-style task in a sandboxed checkout, graded by its hidden tests."""

    Args = CodingArgs
    """environment.args: [environment.args.agent] and [environment.args.sandbox] (the grader reads
    the same settings from the run's config: coding_args)."""

    @classmethod
    def requirements(cls, cfg: Any) -> list[str]:
        """A sandbox backend must work here (bubblewrap, else util-linux unshare), and the sandbox's
        Python must have pytest, which grades every episode (else every reward is 0)."""
        problems = []
        try:
            detect_backend(coding_args(cfg).sandbox.backend)
        except SandboxUnavailable as err:
            problems.append(f"environment.name = CodingEnv: {err}")
        return problems + [f"environment.name = CodingEnv: {p}" for p in pytest_problems(coding_args(cfg).sandbox.python)]

    def __init__(self, args: CodingArgs):
        super().__init__()
        self.settings = args
        self.sandbox: Sandbox | None = None
        self.diff, self.diff_error = b"", ""

    def _context(self) -> RolloutContext:
        if self.ctx is None:
            raise RuntimeError("CodingEnv runs inside a rollout, which sets its ctx before reset")
        return self.ctx

    async def reset(self, row: dict) -> list[dict]:
        ctx = self._context()
        self.row = row
        self.runtime = runtime = await ctx.run_blocking(get_runtime, ctx.cfg)
        task = runtime.grader.task(row)
        cache = runtime.grader.swesmith_cache
        template = await ctx.run_blocking(runtime.templates.get, f"{task.instance_id}::agent",
                                          lambda d: task.materialize_agent(d, cache), "agent state")
        self.sandbox = sb = await _acquire(ctx, runtime, template)

        async def execute(command: str, timeout: float):
            return await ctx.run_blocking(sb.exec, command, timeout)

        async def disk_exceeded() -> bool:  # bytes or files past the slot's caps (sandbox.max_workdir_mb, max_inodes)
            return await ctx.run_blocking(sb.over_disk_cap)

        self.execute, self.disk_exceeded = execute, disk_exceeded
        self.agent, self.prompts = self.settings.agent, _prompts(self.settings.agent.prompt_file)
        self.command_timeout_s = self.settings.sandbox.command_timeout_s
        return self._first_messages(row)

    async def info(self) -> dict[str, Any]:
        """The diff, taken on the host (a tree broken beyond git's reach scores 0, with the reason)."""
        try:
            if self.sandbox is None:
                raise RuntimeError("no sandbox: reset did not finish")
            self.diff = await self._context().run_blocking(self.sandbox.diff_bytes, MAX_DIFF_BYTES)
        except Exception as err:
            self.diff_error = f"{type(err).__name__}: {err}"[:500]
        # the sample's diff is text for people; the reward gets the bytes themselves (reward())
        meta: dict[str, Any] = {"diff": self.diff.decode("utf-8", "replace"), "agent": {
            **self._command_summary(), "instance_id": str(self.row.get("instance_id", "")),
            "sandbox_backend": self.runtime.backend}}
        if self.diff_error:
            meta["diff_error"] = self.diff_error
        return meta

    async def close(self) -> None:
        # Released on the executor, never awaited: close() waits for a command still running in a
        # worker thread, then wipes the slot, also when this episode is being cancelled.
        if self.sandbox is not None:
            self._context().executor.submit(self.sandbox.close)
            self.sandbox = None

    async def reward(self) -> RewardResult:
        """The hidden tests, run on the diff's bytes in a fresh copy (tandem.envs.coding.grading.swe_reward)."""
        graded = Sample(prompt_ids=[], metadata={"diff": self.diff, **({"diff_error": self.diff_error}
                                                                      if self.diff_error else {})})
        return await self._context().run_blocking(swe_reward, graded, self.row)

    @staticmethod
    def step_metrics(samples: list[Sample]) -> dict[str, float]:
        return agent_step_metrics(samples)


swe_agent_rollout = EnvRollout(CodingEnv)
"""The coding agent as a rollout function (rollout.function = "tandem.envs.coding:swe_agent_rollout"): one group of
episodes for one task, for a caller that drives groups itself."""


# ----------------------------------------------------------------------------- metrics
END_REASONS = ("submitted", "turn_limit", "context_limit", "wall_clock", "disk_limit")


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def agent_step_metrics(samples: list[Sample]) -> dict[str, float]:
    """Per-step coding-agent metrics merged into metrics.jsonl by the orchestrator."""
    infos = [s.metadata.get("agent", {}) for s in samples]
    episodes = [s.metadata.get("env", {}) for s in samples]
    turns = [float(e.get("turns", 0)) for e in episodes]
    n_turns = sum(turns)
    exec_times = [t for i in infos for t in i.get("exec_times", [])]
    reward_times = [float(s.reward_info.get("reward_time", 0.0)) for s in samples]
    resp = sum(len(s.loss_mask) for s in samples)
    groups: dict[int, list[float]] = {}
    for s in samples:
        groups.setdefault(s.group_id, []).append(s.reward)
    out = {
        "agent_pass_at_1": statistics.fmean(float(s.reward >= 1.0) for s in samples) if samples else 0.0,
        "agent_pass_at_group": (statistics.fmean(float(max(g) >= 1.0) for g in groups.values()) if groups else 0.0),
        "agent_turns_mean": statistics.fmean(turns) if turns else 0.0,
        "agent_turns_p95": _pct(turns, 0.95),
        "agent_format_error_rate": (sum(i.get("format_errors", 0) for i in infos) / n_turns) if n_turns else 0.0,
        "agent_exec_time_p50_s": _pct(exec_times, 0.50),
        "agent_exec_time_p95_s": _pct(exec_times, 0.95),
        "agent_commands": float(len(exec_times)),
        "agent_reward_time_mean_s": statistics.fmean(reward_times) if reward_times else 0.0,
        "agent_reward_time_max_s": max(reward_times, default=0.0),
        "agent_masked_token_frac": (1.0 - sum(sum(s.loss_mask) for s in samples) / resp) if resp else 0.0,
        "agent_diff_errors": float(sum("diff_error" in s.metadata for s in samples)),
        # a policy that starts forging its reward shows up here first (tandem.envs.coding.verdict)
        "agent_tamper_rate": (sum(bool(s.reward_info.get("tamper")) for s in samples) / len(samples)
                              if samples else 0.0),
        "agent_sandbox_failures": float(sum(bool(s.reward_info.get("infra_failure")) for s in samples)),
        # tasks the grader refuses (tandem.envs.coding.grading_plan): every sample scores 0 with the reason
        "agent_refused_rate": (sum(bool(s.reward_info.get("refused")) for s in samples) / len(samples)
                               if samples else 0.0),
    }
    for reason in END_REASONS:
        out[f"agent_end_{reason}"] = float(sum(e.get("end_reason") == reason for e in episodes))
    return out
