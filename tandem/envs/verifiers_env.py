"""verifiers environments on tandem's loop, token-exact.

    [rollout]
    environment = "tandem.envs.verifiers_env:VerifiersEnv"
    data_path = "data/reverse_text/train.jsonl"     # written by the export command below

    [environment.args]
    env_id = "reverse-text"                         # vf.load_environment(env_id, **env_args)
    env_args = {dataset_name = "data/reverse_text/hf"}

    python -m tandem.envs.verifiers_env export reverse-text data/reverse_text/train.jsonl --args '{...}'

verifiers (prime-rl's Environments Hub format, the classic API of verifiers 0.3: MultiTurnEnv,
ToolEnv, SingleTurnEnv, `@vf.stop`, Rubric) normally calls an OpenAI client itself. Here tandem's
loop generates every turn from token ids and verifiers does everything else, in the order of its
own MultiTurnEnv.rollout:

    reply    -> a vf Response (tool calls parsed by environment.tool_parser) -> add_model_response
    stop?    -> is_completed(state): every @vf.stop condition, unchanged; the episode ends with
                the condition's name as its end reason (e.g. max_turns_reached, no_tools_called)
    observe  -> get_prompt_messages(state), which runs env_response; its new messages are the
                observations (masked tokens); a final_env_response ends the episode
    score    -> cleanup (render_completion), then rubric.score_rollout: state['reward'] is the
                sample's reward, state['metrics'] its reward info

tandem's own limits (environment.max_turns, max_context_tokens, wall_time_s) still apply on top of
the environment's. The environment is loaded once per process and shared by all episodes, as
verifiers itself does; per-episode data lives in the State.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from tandem.env.base import Environment
from tandem.env.parsers import ParsedReply
from tandem.registry import PluginError, importable

_LOADED: dict[str, Any] = {}
_LOAD_LOCK = threading.Lock()


def _verifiers():
    try:
        import verifiers
    except ImportError as err:
        raise PluginError("environment.name = VerifiersEnv needs the verifiers package: "
                          "pip install --no-deps -r requirements-envs.txt") from err
    if not hasattr(verifiers, "MultiTurnEnv"):
        raise PluginError(f"verifiers {getattr(verifiers, '__version__', '?')} has no MultiTurnEnv; "
                          f"tandem drives the classic API of verifiers 0.3 (requirements-envs.txt)")
    return verifiers


def load_vf_environment(env_id: str, env_args: dict | None = None):
    """vf.load_environment(env_id, **env_args), once per process and argument set."""
    key = json.dumps([env_id, env_args or {}], sort_keys=True, default=str)
    with _LOAD_LOCK:
        if key not in _LOADED:
            vf = _verifiers()
            try:
                _LOADED[key] = vf.load_environment(env_id, **(env_args or {}))
            except Exception as err:
                raise PluginError(f"environment.args.env_id '{env_id}': verifiers could not load it: {err}") from err
        return _LOADED[key]


@functools.cache
def no_model_client_class() -> type:
    """A vf Client for init_state that refuses to generate: tandem's loop owns every model turn."""
    from verifiers.legacy.clients.client import Client

    class TandemGenerates(Client):
        def setup_client(self, config):
            return None

        async def to_native_tool(self, tool):
            return tool

        async def to_native_prompt(self, messages):
            return messages, {}

        async def get_native_response(self, *args, **kwargs):
            raise RuntimeError("tandem generates every turn; a verifiers environment must not call the model itself")

        async def raise_from_native_response(self, response):
            return None

        async def from_native_response(self, response):
            return response

        async def close(self):
            return None

    return TandemGenerates


def _message_dict(message: Any) -> dict:
    """A vf message as a chat-template message (content flattened to text)."""
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    content = data.get("content", "")
    if isinstance(content, list):  # content parts: keep the text ones
        content = "".join(part.get("text", "") for part in content if isinstance(part, dict))
    out = {"role": data["role"], "content": content or ""}
    if data.get("tool_call_id"):
        out["tool_call_id"] = data["tool_call_id"]
    return out


class VerifiersEnv(Environment):
    """A verifiers environment (by id, as vf.load_environment finds it) driven by tandem's loop."""

    @classmethod
    def requirements(cls, cfg: Any) -> list[str]:
        if importable("verifiers"):
            return []
        return ["environment.name = VerifiersEnv needs the verifiers package: "
                "pip install --no-deps -r requirements-envs.txt"]

    def __init__(self, env_id: str, env_args: dict | None = None):
        self.vf_env = load_vf_environment(env_id, env_args)
        self.state: Any = None
        self.prompt: Any = None
        self.turn = 0
        self.finished = False

    async def reset(self, row: dict) -> list[dict]:
        self.state = await self.vf_env.init_state(row, no_model_client_class()(object()), "tandem")
        self.state["timing"].generation.start = time.time()
        state = await self.vf_env.setup_state(self.state)
        self.state = state if state is not None else self.state
        self.prompt = self.state["prompt"]
        return [_message_dict(m) for m in self.prompt]

    def offered_tools(self) -> list[dict]:
        tools = self.state["tool_defs"] if self.state is not None else (self.vf_env.tool_defs or [])
        return [{"type": "function", "function": {"name": t.name, "description": t.description,
                                                  "parameters": t.parameters}} for t in tools]

    async def respond(self, reply: ParsedReply, timeout_s: float, max_calls: int) -> list[dict]:
        vf = _verifiers()
        from verifiers.legacy.types import Response, ResponseMessage
        from verifiers.legacy.utils.message_utils import maybe_normalize_messages

        self.turn += 1
        self.format_errors += len(reply.errors)
        calls = [vf.ToolCall(id=f"call_{self.turn}_{i}", name=c.name, arguments=json.dumps(c.arguments))
                 for i, c in enumerate(reply.calls[:max_calls])]
        message = ResponseMessage(content=reply.content if calls else reply.text, tool_calls=calls or None,
                                  finish_reason="length" if reply.finish_reason == "length" else
                                  ("tool_calls" if calls else "stop"),
                                  is_truncated=reply.finish_reason == "length")
        response = Response(id=uuid.uuid4().hex, created=int(time.time()), model="tandem", message=message)
        await self.vf_env.add_model_response(self.state, self.prompt, response)
        if await self.vf_env.is_completed(self.state):
            return self._ended()
        before = len(self.prompt) + len(self.state["trajectory"][-1]["completion"])
        try:
            prompt = await asyncio.wait_for(self.vf_env.get_prompt_messages(self.state), timeout_s)
        except vf.Error as err:  # verifiers' own loop records it; the has_error stop ends the episode
            self.state["error"] = err
            await self.vf_env.is_completed(self.state)
            return self._ended()
        except asyncio.TimeoutError:
            self.done, self.end_reason = True, "env_response_timeout"
            return []
        self.prompt = maybe_normalize_messages(prompt, field_name="prompt_messages")
        if self.state.get("final_env_response") is not None and await self.vf_env.is_completed(self.state):
            return self._ended()
        return [_message_dict(m) for m in self.prompt[before:]]

    def _ended(self) -> list[dict]:
        self.done, self.end_reason = True, str(self.state.get("stop_condition") or "done")
        return []

    async def _finish(self) -> None:
        if self.state is not None and not self.finished:
            self.finished = True
            await self.vf_env.cleanup(self.state)

    async def reward(self) -> tuple[float, dict]:
        await self._finish()
        await self.vf_env.rubric.score_rollout(self.state)
        metrics = {k: float(v) for k, v in (self.state.get("metrics") or {}).items()}
        return float(self.state.get("reward") or 0.0), {"metrics": metrics}

    def info(self) -> dict[str, Any]:
        error = self.state.get("error") if self.state is not None else None
        return {"verifiers": {"stop_condition": self.state.get("stop_condition") if self.state is not None else None,
                              "error": repr(error) if error is not None else None}}

    async def close(self) -> None:
        await self._finish()


def export_dataset(env_id: str, out: Path, env_args: dict | None = None, split: str = "train") -> int:
    """Write a verifiers environment's dataset as tandem JSONL rows (prompt messages, answer, info, task)."""
    vf_env = load_vf_environment(env_id, env_args)
    dataset = vf_env.get_eval_dataset() if split == "eval" else vf_env.get_dataset()
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out, "w") as f:
        for row in dataset:
            f.write(json.dumps(dict(row), default=str) + "\n")
    return len(dataset)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tandem.envs.verifiers_env",
                                     description="Export a verifiers environment's dataset for data.path.")
    sub = parser.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write the environment's dataset as JSONL")
    export.add_argument("env_id")
    export.add_argument("out", type=Path)
    export.add_argument("--args", default="{}", help="env_args as JSON, passed to vf.load_environment")
    export.add_argument("--split", choices=("train", "eval"), default="train")
    ns = parser.parse_args(argv)
    try:
        env_args = json.loads(ns.args)
    except json.JSONDecodeError as err:
        parser.error(f"--args is not JSON: {err}")
    n = export_dataset(ns.env_id, ns.out, env_args, ns.split)
    print(f"wrote {n} rows of {ns.env_id} to {ns.out}")


if __name__ == "__main__":
    main()
