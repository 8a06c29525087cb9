"""The rollout plug-in behind rollout.environment: G episodes of the environment per dataset row.

Per sample: a fresh environment instance (constructed with [environment.args]), its episode
on the shared loop, its info() kept in sample.metadata, its reward() as the sample's reward
(with rollout.reward_timeout_s; a failure scores 0 with the reason, like a reward plug-in),
and close() whatever happened.
"""

from __future__ import annotations

import asyncio
import statistics
import uuid
from typing import Any

from tandem.env.base import Environment, load_environment_class
from tandem.env.chat import ChatFormat
from tandem.env.loop import LOOP_END_REASONS, Episode, run_episode
from tandem.env.parsers import pick_parser
from tandem.rollout.plugins import score_sample
from tandem.sample import Sample


class EnvRollout:
    """`async (ctx, row, group_size) -> list[Sample]` for one environment class; also reports
    the per-step metrics (tandem.orchestrator reads `step_metrics`)."""

    def __init__(self, env_class: type[Environment], args: dict[str, Any] | None = None):
        self.env_class, self.args = env_class, dict(args or {})
        self._chat: dict[int, tuple[ChatFormat, Any]] = {}

    @classmethod
    def from_config(cls, cfg) -> EnvRollout:
        return cls(load_environment_class(cfg.rollout.environment), cfg.environment.args)

    def chat(self, ctx) -> tuple[ChatFormat, Any]:
        """The chat format (with the tool schemas) and the tool-call parser, built once per tokenizer."""
        key = id(ctx.tokenizer)
        if key not in self._chat:
            limits = ctx.cfg.environment
            tools = self.env_class(**self.args).offered_tools()
            self._chat[key] = (ChatFormat(ctx.tokenizer, limits.chat_template_kwargs, tools),
                               pick_parser(limits.tool_parser, ctx.tokenizer))
        return self._chat[key]

    async def __call__(self, ctx, row: dict, group_size: int) -> list[Sample]:
        # A TaskGroup, not gather: when one episode fails (e.g. RolloutAborted at a weight update)
        # the siblings are cancelled at once instead of running on for a group that is regenerated.
        try:
            async with asyncio.TaskGroup() as group:
                tasks = [group.create_task(self.one(ctx, row, i)) for i in range(group_size)]
        except BaseExceptionGroup as eg:
            raise eg.exceptions[0]  # the orchestrator handles RolloutAborted & co by their own type
        return [t.result() for t in tasks]

    async def one(self, ctx, row: dict, index: int) -> Sample:
        env = self.env_class(**self.args)
        env.ctx = ctx
        chat, parse = self.chat(ctx)
        limits = ctx.cfg.environment
        try:
            episode: Episode = await run_episode(
                env, row, engine=ctx.engine, chat=chat, parse=parse, limits=limits,
                sampling_params=dict(ctx.sampling_params), routing_key=f"env:{uuid.uuid4().hex[:16]}")
            sample = episode.sample
            sample.metadata.update(await env.call(env.info, limits.tool_timeout_s))
            sample.metadata["env"] = {**episode.summary(), "sample_in_group": index}

            async def episode_reward(sample: Sample, row: dict):
                # the reward-plug-in shape, so scoring keeps one timeout and one error path
                return await env.call(env.reward, None)

            sample.reward, sample.reward_info = await score_sample(
                episode_reward, sample, row, ctx.cfg.rollout.reward_timeout_s, ctx.executor)
        finally:
            await _close(env, limits.tool_timeout_s)
        return sample

    def step_metrics(self, samples: list[Sample]) -> dict[str, float]:
        reasons = LOOP_END_REASONS + tuple(getattr(self.env_class, "end_reasons", ()))
        out = env_step_metrics(samples, reasons)
        own = getattr(self.env_class, "step_metrics", None)
        return {**out, **(dict(own(samples)) if own else {})}


async def _close(env: Environment, timeout_s: float) -> None:
    try:
        await asyncio.shield(env.call(env.close, timeout_s))
    except Exception:  # a failing close must not hide the episode's own result or error
        pass


def env_step_metrics(samples: list[Sample], end_reasons: tuple[str, ...] = LOOP_END_REASONS) -> dict[str, float]:
    """Per-step metrics of any environment, merged into metrics.jsonl."""
    infos = [s.metadata.get("env", {}) for s in samples]
    if not infos:
        return {}
    turns = [float(i.get("turns", 0)) for i in infos]
    calls = [len(i.get("tool_calls", [])) for i in infos]
    n_turns = sum(turns)
    out = {
        "env_turns_mean": statistics.fmean(turns),
        "env_tool_calls_mean": statistics.fmean(calls),
        "env_format_error_rate": (sum(i.get("format_errors", 0) for i in infos) / n_turns) if n_turns else 0.0,
        "env_success_rate": statistics.fmean(float(s.reward >= 1.0) for s in samples),
        "env_act_s_mean": statistics.fmean(float(i.get("act_s", 0.0)) for i in infos),
    }
    for reason in end_reasons:
        out[f"env_end_{reason}"] = float(sum(i.get("end_reason") == reason for i in infos))
    return out
