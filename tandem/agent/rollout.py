"""The coding-agent rollout plug-in: rollout.function = "tandem.agent:swe_agent_rollout".

Per group (one task, G samples): check the task's repository out once (a template, with
retries), give each sample its own sandbox slot from the warm pool, run the episode,
take the diff on the host, release the slot, and score the sample with the reward
plug-in (tandem.grading:swe_reward, which grades in a fresh clean copy). All blocking
work runs on ctx.executor (sized to rollout concurrency), never on the event loop and
never on asyncio's small default executor.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid

from tandem.agent.chat import ChatFormat
from tandem.agent.loop import END_REASONS, Episode, run_episode
from tandem.agent.prompts import Prompts
from tandem.grading import SweRuntime, get_runtime
from tandem.sample import Sample
from tandem.sandbox.pool import Sandbox

MAX_DIFF_BYTES = 2_000_000
"""A larger diff is not graded (reason recorded): it would bloat the handoff file and is never a bug fix."""

_CHAT: dict[int, ChatFormat] = {}
_PROMPTS: dict[str, Prompts] = {}


def _chat(ctx) -> ChatFormat:
    key = id(ctx.tokenizer)
    if key not in _CHAT:
        _CHAT[key] = ChatFormat(ctx.tokenizer, ctx.cfg.agent.chat_template_kwargs)
    return _CHAT[key]


def _prompts(ctx) -> Prompts:
    path = ctx.cfg.agent.prompt_file
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


async def run_one(ctx, runtime: SweRuntime, row: dict, template, index: int) -> Sample:
    sb = await _acquire(ctx, runtime, template)
    limit = ctx.cfg.sandbox.max_workdir_mb * 1024 * 1024
    try:
        async def execute(command: str, timeout: float):
            return await ctx.run_blocking(sb.exec, command, timeout)

        async def disk_exceeded() -> bool:
            return await ctx.run_blocking(sb.disk_usage, limit) > limit

        episode: Episode = await run_episode(
            engine=ctx.engine, chat=_chat(ctx), prompts=_prompts(ctx), agent=ctx.cfg.agent,
            sampling_params=dict(ctx.sampling_params), task=str(row.get("problem_statement", "")),
            execute=execute, command_timeout_s=ctx.cfg.sandbox.command_timeout_s, disk_exceeded=disk_exceeded,
            routing_key=f"{row.get('instance_id', 'task')}:{uuid.uuid4().hex[:12]}")
        sample = episode.sample
        try:
            diff = await ctx.run_blocking(sb.diff, MAX_DIFF_BYTES)
        except Exception as err:  # too large, or a tree broken beyond git's reach: 0, with the reason
            sample.metadata["diff_error"] = f"{type(err).__name__}: {err}"[:500]
            diff = ""
        sample.metadata["diff"] = diff
        sample.metadata["agent"] = {**episode.summary(), "instance_id": str(row.get("instance_id", "")),
                                    "sandbox_backend": runtime.backend, "sample_in_group": index}
    finally:
        # Released on the executor even when this task is being cancelled: close() waits for
        # a command still running in a worker thread, then wipes the slot.
        ctx.executor.submit(sb.close)
    await ctx.score(sample, row)
    return sample


async def swe_agent_rollout(ctx, row: dict, group_size: int) -> list[Sample]:
    """Rollout plug-in: G agent episodes on one SWE-style task, each graded by hidden tests."""
    runtime = await ctx.run_blocking(get_runtime, ctx.cfg)
    task = runtime.grader.task(row)
    cache = runtime.grader.swesmith_cache
    template = await ctx.run_blocking(
        runtime.templates.get, f"{task.instance_id}::agent", lambda d: task.materialize_agent(d, cache),
        "agent state")
    # A TaskGroup, not gather: when one episode fails (e.g. RolloutAborted at a weight update) the
    # siblings are cancelled at once instead of running on for a group that will be regenerated.
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(run_one(ctx, runtime, row, template, i)) for i in range(group_size)]
    except BaseExceptionGroup as eg:
        raise eg.exceptions[0]  # the orchestrator handles RolloutAborted & co by their own type
    return [t.result() for t in tasks]


# ----------------------------------------------------------------------------- metrics
def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return 0.0
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def agent_step_metrics(samples: list[Sample]) -> dict[str, float]:
    """Per-step agent metrics merged into metrics.jsonl by the orchestrator."""
    infos = [s.metadata.get("agent", {}) for s in samples]
    turns = [float(i.get("turns", 0)) for i in infos]
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
        # a policy that starts forging its reward shows up here first (tandem.verdict)
        "agent_tamper_rate": (sum(bool(s.reward_info.get("tamper")) for s in samples) / len(samples)
                              if samples else 0.0),
        "agent_sandbox_failures": float(sum(bool(s.reward_info.get("infra_failure")) for s in samples)),
    }
    for reason in END_REASONS:
        out[f"agent_end_{reason}"] = float(sum(i.get("end_reason") == reason for i in infos))
    return out


swe_agent_rollout.step_metrics = agent_step_metrics  # type: ignore[attr-defined]
