"""Multi-turn environments and the one agent loop they all run on.

- base.py     the contract: Environment (reset, tools as typed methods, reward), loading by name
- parsers.py  tool calls in the model family's format (Qwen/Hermes JSON, the tiny model's tool tokens)
- chat.py     token bookkeeping: trajectories grow by appending ids, never by re-tokenising
- loop.py     one episode and its end reasons
- rollout.py  EnvRollout, the rollout plug-in behind environment.name, and its per-step metrics
"""

from tandem.env.base import Environment, load_environment_class
from tandem.env.chat import ChatFormat
from tandem.env.loop import LOOP_END_REASONS, Episode, TurnRecord, run_episode
from tandem.env.parsers import ParsedReply, ToolCall, parse_hermes, parse_tool_tokens, pick_parser
from tandem.env.env_rollout import EnvRollout, env_step_metrics

__all__ = ["ChatFormat", "EnvRollout", "Environment", "Episode", "LOOP_END_REASONS", "ParsedReply", "ToolCall",
           "TurnRecord", "env_step_metrics", "load_environment_class", "parse_hermes", "parse_tool_tokens",
           "pick_parser", "run_episode"]
