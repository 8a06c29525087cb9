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


async def run_episode(*, engine: Any, chat: ChatFormat, prompts: Prompts, agent: AgentConfig,
                      sampling_params: dict, task: str, execute: Executor, command_timeout_s: float,
                      disk_exceeded: Callable[[], Awaitable[bool]] | None = None,
                      routing_key: str | None = None) -> Episode:
    """One agent episode. `routing_key` names the trajectory for sglang-router's 'manual' policy,
    so every turn returns to the engine whose prefix cache holds the conversation so far."""
    start = time.monotonic()
    deadline = start + agent.wall_time_s
    messages = [
        {"role": "system", "content": render(prompts.system, sentinel=agent.submit_sentinel)},
        {"role": "user", "content": render(prompts.instance, task=task, sentinel=agent.submit_sentinel)},
    ]
    sample = Sample(prompt_ids=chat.prompt_ids(messages))
    versions: list[int] = []
    turns: list[TurnRecord] = []
    end = ""
    max_new = int(sampling_params.get("max_new_tokens", 256))

    while True:
        room = agent.max_context_tokens - len(sample.tokens)
        if room < agent.min_turn_tokens:
            end = "context_limit"
            break
        left = deadline - time.monotonic()
        if left <= 0:
            end = "wall_clock"
            break
        params = {**sampling_params, "max_new_tokens": min(max_new, room)}
        try:
            out = await asyncio.wait_for(engine.generate(sample.tokens, params, routing_key=routing_key), left)
        except asyncio.TimeoutError:
            end = "wall_clock"
            break
        meta = out.get("meta_info") or {}
        ids = [int(i) for i in out["output_ids"]]
        logprobs = [float(t[0]) for t in meta.get("output_token_logprobs") or []]
        if len(logprobs) != len(ids):
            raise ValueError(f"engine returned {len(ids)} output ids but {len(logprobs)} logprobs")
        sample.append_model_tokens(ids, logprobs)
        versions.append(int(meta.get("weight_version", 0) or 0))
        finish = meta.get("finish_reason") or {}
        finish_type = finish.get("type", "") if isinstance(finish, dict) else str(finish)
        text = chat.decode(ids)
        messages.append({"role": "assistant", "content": text})
        actions = parse_actions(text, agent.action_regex)
        record = TurnRecord(actions[0] if len(actions) == 1 else None, len(actions), model_tokens=len(ids),
                            finish_reason=finish_type)
        turns.append(record)

        if len(actions) != 1:
            observation = render(prompts.format_error, actions=actions, finish_reason=finish_type,
                                 sentinel=agent.submit_sentinel)
        else:
            timeout = max(0.1, min(command_timeout_s, deadline - time.monotonic()))
            result = await execute(actions[0], timeout)
            record.returncode, record.exec_s = result.returncode, result.duration_s
            record.timed_out, record.output_chars = result.timed_out, len(result.output)
            if is_submission(result, agent.submit_sentinel):
                end = "submitted"
                break
            if disk_exceeded is not None and await disk_exceeded():
                end = "disk_limit"
                break
            observation = observation_text(prompts, result, agent.output_max_chars, timeout)

        # The trajectory only grows by an observation that another model turn will follow.
        if len(turns) >= agent.max_turns:
            end = "turn_limit"
            break
        if time.monotonic() >= deadline:
            end = "wall_clock"
            break
        cont = chat.continuation_ids(ids, observation)
        if len(sample.tokens) + len(cont) + agent.min_turn_tokens > agent.max_context_tokens:
            end = "context_limit"
            break
        sample.append_context_tokens(cont)
        messages.append({"role": "user", "content": observation})

    sample.weight_version = min(versions) if versions else 0
    sample.finish_reason = "length" if end == "context_limit" else end
    sample.response_text = messages[-1]["content"] if messages[-1]["role"] == "assistant" else ""
    return Episode(sample, end, messages, turns, time.monotonic() - start)
