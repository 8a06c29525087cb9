"""[environment]: the multi-turn environment a run trains in, its arguments and its episode limits.

environment.name picks the class; environment.args are its constructor's arguments, typed by
the class itself (an environment that declares `Args`, a pydantic model, gets them validated
and every bad key named as environment.args.KEY before anything starts); the limits are the
shared agent loop's (tandem.env).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from tandem.config.base import Section


class EnvironmentConfig(Section):
    name: str = ""
    """A multi-turn environment class, 'module:Class' or 'file.py:Class' (tandem.env.Environment), e.g. 'tandem.envs.coding:CodingEnv'; its episodes run on the shared agent loop and its reward() scores them. Empty: rollout.function runs."""
    args: dict[str, Any] = {}
    """The environment's arguments (TOML: [environment.args]), checked against its `Args` model when it declares one (the coding environment's: [environment.args.agent], [environment.args.sandbox])."""
    tool_parser: Literal["auto", "hermes", "tool_tokens"] = "auto"
    """How tool calls are read from a reply: hermes = Qwen2.5/Qwen3/Hermes `<tool_call>{json}</tool_call>`; tool_tokens = the tiny model's one-token-per-tool format (model.tiny.tool_tokens); auto = tool_tokens when the tokenizer has them, else hermes."""
    max_turns: int = Field(20, ge=1)
    """Most model turns per episode (a malformed reply uses up a turn); the episode then ends with 'turn_limit'."""
    max_context_tokens: int = Field(32768, ge=1)
    """Longest trajectory (prompt + every turn + observations) in tokens; the episode ends with 'context_limit' before exceeding it."""
    min_turn_tokens: int = Field(16, ge=1)
    """End with 'context_limit' when fewer tokens than this are left for the next reply."""
    wall_time_s: float = Field(1800.0, gt=0)
    """Wall-clock budget of one episode (generation, tools and environment steps); past it the episode ends with 'wall_clock'."""
    tool_timeout_s: float = Field(60.0, gt=0)
    """Wall-clock limit of one tool call (or one step/reset of the environment); past it the model is told the call timed out."""
    max_tool_calls_per_turn: int = Field(8, ge=1)
    """Tool calls run from one reply; further calls in the same reply are answered with an error."""
    chat_template_kwargs: dict[str, Any] = {}
    """Extra arguments for tokenizer.apply_chat_template (e.g. {enable_thinking = false} for Qwen3)."""
