"""One agent episode: generate, parse one bash action, run it sandboxed, observe, repeat.

The loop is mini-swe-agent's DefaultAgent.run/step, token-in token-out: the engine is
called with the trajectory's ids, and every turn extends them (see chat.py). It ends on

    submitted      a command's first output line is the submit sentinel (return code 0)
    turn_limit     agent.max_turns model turns were used (format errors count)
    context_limit  the next turn would not fit in agent.max_context_tokens
    wall_clock     agent.wall_time_s elapsed (generation and commands both count)
    disk_limit     the sandbox grew past sandbox.max_workdir_mb

A generation aborted for a weight update raises RolloutAborted out of the episode; the
orchestrator regenerates the group.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from tandem.agent.chat import ChatFormat
from tandem.agent.prompts import Prompts, render
from tandem.config import AgentConfig
from tandem.sample import Sample
from tandem.sandbox.runner import ExecResult

END_REASONS = ("submitted", "turn_limit", "context_limit", "wall_clock", "disk_limit")


@dataclass
class TurnRecord:
    action: str | None
    """The command run this turn (None on a format error)."""
    n_actions: int
    returncode: int | None = None
    exec_s: float = 0.0
    timed_out: bool = False
    output_chars: int = 0
    model_tokens: int = 0
    finish_reason: str = ""


@dataclass
class Episode:
    sample: Sample
    end_reason: str
    messages: list[dict]
    turns: list[TurnRecord] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def format_errors(self) -> int:
        return sum(t.n_actions != 1 for t in self.turns)

    def summary(self) -> dict[str, Any]:
        """What goes into sample.metadata['agent'] (compact: the handoff file carries it per sample)."""
        return {
            "end_reason": self.end_reason,
            "turns": len(self.turns),
            "format_errors": self.format_errors,
            "exec_times": [round(t.exec_s, 4) for t in self.turns if t.action is not None],
            "elapsed_s": round(self.elapsed_s, 3),
            "actions": [(t.action or "")[:200] for t in self.turns],
            "returncodes": [t.returncode for t in self.turns],
        }


def parse_actions(text: str, action_regex: str) -> list[str]:
    return [a.strip() for a in re.findall(action_regex, text, re.DOTALL)]


def is_submission(result: ExecResult, sentinel: str) -> bool:
    """mini-swe-agent's rule: the first output line is the sentinel and the command succeeded."""
    lines = result.output.lstrip().splitlines()
    return bool(lines) and lines[0].strip() == sentinel and result.returncode == 0


def observation_text(prompts: Prompts, result: ExecResult, max_chars: int, command_timeout_s: float) -> str:
    exception = ""
    if result.timed_out:
        exception = (f"The command timed out after {command_timeout_s:g}s and was killed, with every process "
                     f"it started. Avoid long-running or interactive commands.")
    return render(prompts.observation, output=result.output, returncode=result.returncode,
                  exception_info=exception, max_chars=max_chars)


Executor = Callable[[str, float], Awaitable[ExecResult]]
"""Runs one command in the episode's sandbox with a timeout (off the event loop)."""


class _EpisodeRun:
    """One episode's state between turns: the trajectory, the chat so far and the turn records."""

    def __init__(self, *, engine: Any, chat: ChatFormat, prompts: Prompts, agent: AgentConfig,
                 sampling_params: dict, task: str, execute: Executor, command_timeout_s: float,
                 disk_exceeded: Callable[[], Awaitable[bool]] | None, routing_key: str | None):
        self.start = time.monotonic()
        self.deadline = self.start + agent.wall_time_s
        self.engine, self.chat, self.prompts, self.agent = engine, chat, prompts, agent
        self.sampling_params = sampling_params
        self.max_new = int(sampling_params.get("max_new_tokens", 256))
        self.execute, self.command_timeout_s = execute, command_timeout_s
        self.disk_exceeded, self.routing_key = disk_exceeded, routing_key
        self.messages = [
            {"role": "system", "content": render(prompts.system, sentinel=agent.submit_sentinel)},
            {"role": "user", "content": render(prompts.instance, task=task, sentinel=agent.submit_sentinel)},
        ]
        self.sample = Sample(prompt_ids=chat.prompt_ids(self.messages))
        self.versions: list[int] = []
        self.turns: list[TurnRecord] = []

    async def run_turns(self) -> str:
        """Model turn, action, observation, until one of END_REASONS; returns it."""
        while True:
            room = self.agent.max_context_tokens - len(self.sample.tokens)
            if room < self.agent.min_turn_tokens:
                return "context_limit"
            left = self.deadline - time.monotonic()
            if left <= 0:
                return "wall_clock"
            params = {**self.sampling_params, "max_new_tokens": min(self.max_new, room)}
            try:
                out = await asyncio.wait_for(
                    self.engine.generate(self.sample.tokens, params, routing_key=self.routing_key), left)
            except asyncio.TimeoutError:
                return "wall_clock"
            ids, finish_type = self.take_output(out)
            end, observation = await self.act(ids, finish_type)
            if end is None:
                end = self.observe(ids, observation)
            if end is not None:
                return end

    def take_output(self, out: dict) -> tuple[list[int], str]:
        """Append the model's tokens (with their logprobs) to the trajectory; returns them and the finish type."""
        meta = out.get("meta_info") or {}
        ids = [int(i) for i in out["output_ids"]]
        logprobs = [float(t[0]) for t in meta.get("output_token_logprobs") or []]
        if len(logprobs) != len(ids):
            raise ValueError(f"engine returned {len(ids)} output ids but {len(logprobs)} logprobs")
        version = int(meta.get("weight_version", 0) or 0)
        self.sample.append_model_tokens(ids, logprobs, version)
        self.versions.append(version)
        finish = meta.get("finish_reason") or {}
        return ids, finish.get("type", "") if isinstance(finish, dict) else str(finish)

    async def act(self, ids: list[int], finish_type: str) -> tuple[str | None, str]:
        """Parse the turn's action and run it: (end reason, "") or (None, the observation to show)."""
        agent = self.agent
        text = self.chat.decode(ids)
        self.messages.append({"role": "assistant", "content": text})
        actions = parse_actions(text, agent.action_regex)
        record = TurnRecord(actions[0] if len(actions) == 1 else None, len(actions), model_tokens=len(ids),
                            finish_reason=finish_type)
        self.turns.append(record)
        if len(actions) != 1:
            return None, render(self.prompts.format_error, actions=actions, finish_reason=finish_type,
                                sentinel=agent.submit_sentinel)
        timeout = max(0.1, min(self.command_timeout_s, self.deadline - time.monotonic()))
        result = await self.execute(actions[0], timeout)
        record.returncode, record.exec_s = result.returncode, result.duration_s
        record.timed_out, record.output_chars = result.timed_out, len(result.output)
        if is_submission(result, agent.submit_sentinel):
            return "submitted", ""
        if self.disk_exceeded is not None and await self.disk_exceeded():
            return "disk_limit", ""
        return None, observation_text(self.prompts, result, agent.output_max_chars, timeout)

    def observe(self, ids: list[int], observation: str) -> str | None:
        """Extend the trajectory by the observation, or return why the episode ends here instead."""
        # The trajectory only grows by an observation that another model turn will follow.
        if len(self.turns) >= self.agent.max_turns:
            return "turn_limit"
        if time.monotonic() >= self.deadline:
            return "wall_clock"
        cont = self.chat.continuation_ids(ids, observation)
        if len(self.sample.tokens) + len(cont) + self.agent.min_turn_tokens > self.agent.max_context_tokens:
            return "context_limit"
        self.sample.append_context_tokens(cont)
        self.messages.append({"role": "user", "content": observation})
        return None

    def episode(self, end: str) -> Episode:
        sample, messages = self.sample, self.messages
        sample.weight_version = min(self.versions) if self.versions else 0
        sample.finish_reason = "length" if end == "context_limit" else end
        sample.response_text = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
        return Episode(sample, end, messages, self.turns, time.monotonic() - self.start)


async def run_episode(*, engine: Any, chat: ChatFormat, prompts: Prompts, agent: AgentConfig,
                      sampling_params: dict, task: str, execute: Executor, command_timeout_s: float,
                      disk_exceeded: Callable[[], Awaitable[bool]] | None = None,
                      routing_key: str | None = None) -> Episode:
    """One agent episode. `routing_key` names the trajectory for sglang-router's 'manual' policy,
    so every turn returns to the engine whose prefix cache holds the conversation so far."""
    run = _EpisodeRun(engine=engine, chat=chat, prompts=prompts, agent=agent, sampling_params=sampling_params,
                      task=task, execute=execute, command_timeout_s=command_timeout_s,
                      disk_exceeded=disk_exceeded, routing_key=routing_key)
    return run.episode(await run.run_turns())
