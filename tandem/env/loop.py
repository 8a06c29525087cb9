"""The agent loop every environment runs on: generate, parse, act, observe, repeat.

Token in, token out: the engine gets the trajectory's ids and every turn extends them
(tandem.env.chat): the model's ids with the engine's logprobs and weight version (mask 1),
then the template and observation ids (mask 0). Nothing the model wrote is re-tokenised.
An episode ends with

    no_tool_call   the model replied without calling a tool (its reply is the answer)
    done           the environment set `done` (it may name its own reason, e.g. 'submitted')
    turn_limit     environment.max_turns model turns were used
    context_limit  the next turn would not fit in environment.max_context_tokens
    wall_clock     environment.wall_time_s elapsed (generation, tools and steps all count)

A generation aborted for a weight update raises RolloutAborted out of the episode; the
orchestrator regenerates the group.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from tandem.config import EnvironmentConfig
from tandem.env.base import Environment
from tandem.env.chat import ChatFormat
from tandem.env.parsers import ParsedReply
from tandem.rollout.single_turn import read_output
from tandem.sample import Sample

LOOP_END_REASONS = ("no_tool_call", "done", "turn_limit", "context_limit", "wall_clock")


@dataclass
class TurnRecord:
    model_tokens: int
    finish_reason: str
    tool_calls: list[str] = field(default_factory=list)
    """Names of the tools called this turn, in order."""
    format_errors: int = 0
    """Malformed parts of the reply, as the environment counted them (tool calls, or a bash block)."""
    observation_tokens: int = 0
    act_s: float = 0.0
    """Time the environment took to answer (tools or step)."""
    spanned_update: bool = False
    """Weights changed while this turn generated (partial_rollout = 'continue'): its later tokens
    come from the new weights over the old weights' KV cache, replayable under neither version."""


@dataclass
class Episode:
    sample: Sample
    end_reason: str
    messages: list[dict]
    turns: list[TurnRecord] = field(default_factory=list)
    elapsed_s: float = 0.0

    def summary(self) -> dict[str, Any]:
        """What goes into sample.metadata['env'] (compact: the handoff file carries it per sample)."""
        return {
            "end_reason": self.end_reason,
            "turns": len(self.turns),
            "tool_calls": [name for t in self.turns for name in t.tool_calls],
            "format_errors": sum(t.format_errors for t in self.turns),
            "act_s": round(sum(t.act_s for t in self.turns), 4),
            "elapsed_s": round(self.elapsed_s, 3),
            "spanned_turns": [i for i, t in enumerate(self.turns) if t.spanned_update],
        }


class _EpisodeRun:
    """One episode's state between turns: the trajectory, the chat so far and the turn records."""

    def __init__(self, env: Environment, messages: list[dict], *, engine: Any, chat: ChatFormat,
                 parse: Callable[[str, list[str]], ParsedReply], limits: EnvironmentConfig,
                 sampling_params: dict, routing_key: str | None, start: float):
        self.env, self.engine, self.chat, self.parse, self.limits = env, engine, chat, parse, limits
        self.start, self.deadline = start, start + limits.wall_time_s
        self.sampling_params, self.routing_key = sampling_params, routing_key
        self.max_new = int(sampling_params.get("max_new_tokens", 256))
        self.tool_names = [tool["function"]["name"] for tool in env.offered_tools()]
        self.messages = messages
        self.sample = Sample(prompt_ids=chat.prompt_ids(messages))
        self.versions: list[int] = []
        self.turns: list[TurnRecord] = []

    async def run_turns(self) -> str:
        """Model turn, environment answer, until one of the end reasons; returns it."""
        while True:
            room = self.limits.max_context_tokens - len(self.sample.tokens)
            if room < self.limits.min_turn_tokens:
                return "context_limit"
            left = self.deadline - time.monotonic()
            if left <= 0:
                return "wall_clock"
            params = {**self.sampling_params, "max_new_tokens": min(self.max_new, room)}
            # Earlier turns' routed experts are kept, not asked for again (named only once there are some:
            # an engine client without MoE support never sees the argument).
            routed_from = self.sample.routed_rows
            more = {"routed_experts_start_len": routed_from} if routed_from else {}
            try:
                out = await asyncio.wait_for(
                    self.engine.generate(self.sample.tokens, params, routing_key=self.routing_key, **more), left)
            except asyncio.TimeoutError:
                return "wall_clock"
            ids = self.take_output(out, routed_from)
            end = await self.act(ids)
            if end is not None:
                return end

    def take_output(self, out: dict, routed_from: int = 0) -> list[int]:
        """Append the model's tokens (with their logprobs, version and routed experts) to the trajectory."""
        ids, logprobs, version, finish, finished_on = read_output(out)
        self.sample.append_model_tokens(ids, logprobs, version)
        self.sample.record_routing(out.get("meta_info") or {}, routed_from)
        self.versions.append(version)
        self.turns.append(TurnRecord(len(ids), finish, spanned_update=finished_on > version))
        return ids

    async def act(self, ids: list[int]) -> str | None:
        """Let the environment answer the reply; extend the trajectory, or return why the episode ends."""
        reply = self.parse(self.chat.decode(ids), self.tool_names)
        turn = self.turns[-1]
        reply.finish_reason = turn.finish_reason
        turn.tool_calls = [c.name for c in reply.calls]
        self.messages.append({"role": "assistant", "content": reply.text})
        began, errors_before = time.monotonic(), self.env.format_errors
        timeout = max(0.1, min(self.limits.tool_timeout_s, self.deadline - began))
        observations = await self.env.respond(reply, timeout, self.limits.max_tool_calls_per_turn)
        turn.act_s = time.monotonic() - began
        turn.format_errors = self.env.format_errors - errors_before
        if self.env.done:
            return self.env.end_reason
        if not observations:
            return "no_tool_call"
        # The trajectory only grows by observations that another model turn will follow.
        if len(self.turns) >= self.limits.max_turns:
            return "turn_limit"
        if time.monotonic() >= self.deadline:
            return "wall_clock"
        cont = self.chat.continuation_ids(ids, observations)
        if len(self.sample.tokens) + len(cont) + self.limits.min_turn_tokens > self.limits.max_context_tokens:
            return "context_limit"
        self.sample.append_context_tokens(cont)
        turn.observation_tokens = len(cont)
        self.messages.extend(observations)
        return None

    def episode(self, end: str) -> Episode:
        sample, messages = self.sample, self.messages
        sample.weight_version = min(self.versions) if self.versions else 0
        sample.finish_reason = "length" if end == "context_limit" else end
        sample.response_text = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
        return Episode(sample, end, messages, self.turns, time.monotonic() - self.start)


def first_messages(start: str | list[dict]) -> list[dict]:
    """What reset returned, as chat messages."""
    if isinstance(start, str):
        return [{"role": "user", "content": start}]
    if isinstance(start, list) and start and all(isinstance(m, dict) and "role" in m for m in start):
        return [dict(m) for m in start]
    raise TypeError(f"reset() must return the first user message (str) or a list of chat messages, got {start!r:.200}")


async def run_episode(env: Environment, row: dict, *, engine: Any,
                      chat: ChatFormat | Callable[[list[dict]], ChatFormat], parse: Callable[[str, list[str]], ParsedReply], limits: EnvironmentConfig,
                      sampling_params: dict, routing_key: str | None = None) -> Episode:
    """One episode of `env` on `row`. `routing_key` names the trajectory for sglang-router's
    'manual' policy, so every turn goes to the engine holding its prefix. `chat` is the chat
    format, or a function of the tools the environment offers once reset (adapters learn theirs
    from the row or a server) returning it."""
    start = time.monotonic()
    messages = first_messages(await env.call(env.reset, limits.tool_timeout_s, row))
    if not isinstance(chat, ChatFormat):
        chat = chat(env.offered_tools())
    run = _EpisodeRun(env, messages, engine=engine, chat=chat, parse=parse, limits=limits,
                      sampling_params=sampling_params, routing_key=routing_key, start=start)
    return run.episode(await run.run_turns())
