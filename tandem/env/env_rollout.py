"""The rollout plug-in behind environment.name: G episodes of the environment per dataset row.

Per sample: a fresh environment instance (constructed with [environment.args]), its episode
on the shared loop, its info() kept in sample.metadata, its reward() as the sample's reward
(with rollout.reward_timeout_s; a failure scores 0 with the reason, like a reward plug-in),
and close() whatever happened.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import uuid
from typing import Any, Callable

from tandem.env.base import Environment, environment_args, load_environment_class
from tandem.env.chat import ChatFormat
from tandem.env.loop import LOOP_END_REASONS, Episode, run_episode
from tandem.env.parsers import ParsedReply, pick_parser
from tandem.rollout.client import REQUEST_SEED, trajectory_seed
from tandem.rollout.scoring import score_sample
from tandem.sample import Sample


class EnvRollout:
    """`async (ctx, row, group_size) -> list[Sample]` for one environment class; also reports
    the per-step metrics (tandem.orchestrator reads `step_metrics`)."""

    def __init__(self, env_class: type[Environment], args: dict[str, Any] | None = None):
        """`args`: environment.args; None = the run's, read at the first episode (a module-level
        EnvRollout used as rollout.function)."""
        self.env_class = env_class
        self.args = None if args is None else environment_args(env_class, args)
        self._chat: dict[tuple[int, str], ChatFormat] = {}
        self._parse: Callable[[str, list[str]], ParsedReply] | None = None

    @classmethod
    def from_config(cls, cfg) -> EnvRollout:
        return cls(load_environment_class(cfg.environment.name), cfg.environment.args)

    def chat_for(self, ctx, tools: list[dict]) -> ChatFormat:
        """The chat format for the tools an environment offers, built once per tokenizer and tool set
        (an adapter's tools may differ per row, e.g. verifiers' info['tool_defs'])."""
        key = (id(ctx.tokenizer), json.dumps(tools, sort_keys=True, default=str))
        if key not in self._chat:
            self._chat[key] = ChatFormat(ctx.tokenizer, ctx.cfg.environment.chat_template_kwargs, tools)
        return self._chat[key]

    def parser(self, ctx) -> Callable[[str, list[str]], ParsedReply]:
        if self._parse is None:
            self._parse = pick_parser(ctx.cfg.environment.tool_parser, ctx.tokenizer)
        return self._parse

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
        if (seed := REQUEST_SEED.get()) is not None:  # run.reproducible: each episode its own seed (this task only)
            REQUEST_SEED.set(trajectory_seed(seed, index))
        if self.args is None:
            self.args = environment_args(self.env_class, ctx.cfg.environment.args)
        env = self.env_class(**self.args)
        env.ctx = ctx
        limits = ctx.cfg.environment
        try:
            episode: Episode = await run_episode(
                env, row, engine=ctx.engine, chat=lambda tools: self.chat_for(ctx, tools), parse=self.parser(ctx),
                limits=limits,
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
    # an environment may name its own reasons (verifiers' stop conditions): count those seen too
    seen = sorted({str(i["end_reason"]) for i in infos if i.get("end_reason")} - set(end_reasons))
    for reason in (*end_reasons, *seen):
        out[f"env_end_{reason}"] = float(sum(i.get("end_reason") == reason for i in infos))
    return out
