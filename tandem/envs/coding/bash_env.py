"""The coding agent's turn: mini-swe-agent's text format, as an environment on tandem.env's loop.

Each reply must hold exactly one bash block (agent.action_regex); it runs through `execute`
(a sandboxed shell) and its output comes back as the next user turn. Zero or several blocks
is a format error whose message goes back instead, and uses up a turn. The episode ends

    submitted      a command's first output line is the submit sentinel (return code 0)
    disk_limit     the sandbox grew past environment.args.sandbox.max_workdir_mb

besides the loop's own limits (turn_limit, context_limit, wall_clock). This class knows no
sandbox: tandem.envs.coding.coding_env gives it one; tests give it a scripted shell.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Awaitable, Callable

from tandem.envs.coding.prompts import Prompts, render
from tandem.envs.coding.settings import AgentSettings
from tandem.env.base import Environment
from tandem.rollout.plugins import RewardResult
from tandem.env.parsers import ParsedReply
from tandem.envs.coding.sandbox.runner import ExecResult

Executor = Callable[[str, float], Awaitable[ExecResult]]
"""Runs one command in the episode's sandbox with a timeout (off the event loop)."""


@dataclass
class CommandRecord:
    action: str | None
    """The command run this turn (None on a format error)."""
    n_actions: int
    returncode: int | None = None
    exec_s: float = 0.0
    timed_out: bool = False
    output_chars: int = 0


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


class BashAgentEnv(Environment):
    end_reasons = ("submitted", "disk_limit")

    def __init__(self, *, execute: Executor | None = None, agent: AgentSettings | None = None,
                 prompts: Prompts | None = None, command_timeout_s: float = 60.0,
                 disk_exceeded: Callable[[], Awaitable[bool]] | None = None):
        self.execute, self.disk_exceeded = execute, disk_exceeded
        self.agent, self.prompts = agent or AgentSettings(), prompts or Prompts()
        self.command_timeout_s = command_timeout_s
        self.commands: list[CommandRecord] = []

    def reset(self, row: dict) -> list[dict] | Awaitable[list[dict]]:
        return self._first_messages(row)

    def _first_messages(self, row: dict) -> list[dict]:
        sentinel = self.agent.submit_sentinel
        return [{"role": "system", "content": render(self.prompts.system, sentinel=sentinel)},
                {"role": "user", "content": render(self.prompts.instance, task=str(row.get("problem_statement", "")),
                                                   sentinel=sentinel)}]

    async def respond(self, reply: ParsedReply, timeout_s: float, max_calls: int) -> list[dict]:
        """Run the reply's one bash action; the observation, or a format error, is the next user turn."""
        agent = self.agent
        actions = parse_actions(reply.text, agent.action_regex)
        record = CommandRecord(actions[0] if len(actions) == 1 else None, len(actions))
        self.commands.append(record)
        if len(actions) != 1:
            self.format_errors += 1
            return [{"role": "user", "content": render(self.prompts.format_error, actions=actions,
                                                       finish_reason=reply.finish_reason,
                                                       sentinel=agent.submit_sentinel)}]
        timeout = max(0.1, min(self.command_timeout_s, timeout_s))
        if self.execute is None:
            raise RuntimeError(f"{type(self).__name__} has no execute function to run the agent's commands with")
        result = await self.execute(actions[0], timeout)
        record.returncode, record.exec_s = result.returncode, result.duration_s
        record.timed_out, record.output_chars = result.timed_out, len(result.output)
        if is_submission(result, agent.submit_sentinel):
            return self._finish("submitted")
        if self.disk_exceeded is not None and await self.disk_exceeded():
            return self._finish("disk_limit")
        return [{"role": "user", "content": observation_text(self.prompts, result, agent.output_max_chars, timeout)}]

    def _finish(self, reason: str) -> list[dict]:
        self.done, self.end_reason = True, reason
        return []

    def _command_summary(self) -> dict[str, Any]:
        """The commands of the episode, for sample.metadata['agent'] (compact: it rides the handoff file)."""
        return {
            "format_errors": sum(c.n_actions != 1 for c in self.commands),
            "exec_times": [round(c.exec_s, 4) for c in self.commands if c.action is not None],
            "actions": [(c.action or "")[:200] for c in self.commands],
            "returncodes": [c.returncode for c in self.commands],
        }

    def reward(self) -> float | Awaitable[RewardResult]:
        # Scored by the hidden tests in tandem.envs.coding.coding_env; a bare shell episode has no grader.
        raise NotImplementedError("BashAgentEnv has no grader; use tandem.envs.coding:CodingEnv")
