"""OpenEnv environments (Meta / Hugging Face) reached by URL, through OpenEnv's own client.

    [rollout]
    environment = "tandem.envs.openenv_env:OpenEnvEnv"
    data_path = "data/my_task/train.jsonl"          # rows: {"prompt": ..., "reset": {...}}

    [environment.args]
    url = "http://127.0.0.1:8000"                   # a running OpenEnv server (uvicorn ...server.app:app)

Each episode opens its own WebSocket session (openenv's GenericEnvClient, `/ws`), so concurrent
episodes never share environment state. A server allows create_app's max_concurrent_envs sessions
(1 in `openenv init`'s template); `max_sessions` makes episodes wait for a session instead of
failing, and a session refused at capacity is retried until connect_timeout_s.

The tools the model sees come from the server, never from tandem:
- an MCP environment (its action is CallToolAction) offers the server's MCP tools
  (ListToolsAction); a call is CallToolAction(tool_name, arguments);
- any other environment offers one tool, `tool_name` (default "step"), whose parameters are the
  action's JSON schema (GET /schema); a call's arguments are the action.

reset(row): the row's prompt is the first user message; the reset observation, when it has
content, is appended to it (TRL's environment_factory convention); row["reset"] holds keyword
arguments for the server's reset. Each tool result is the step's observation as text; a step
with done=True ends the episode (end reason 'env_done'). The reward is the sum of the step rewards
(or the last one, with reward = "last"); OpenEnv computes rewards server-side, out of the
model's reach.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from typing import Any, Literal

import httpx

from tandem.env.base import Environment
from tandem.env.parsers import ToolCall
from tandem.registry import PluginError, importable

_TOOLS: dict[tuple[str, str], tuple[bool, list[dict]]] = {}
_TOOLS_LOCK = threading.Lock()
_OBSERVATION_BOOKKEEPING = ("reward", "done", "metadata")
_SESSIONS: dict[str, asyncio.Semaphore] = {}


def _client_class():
    try:
        from openenv.core.generic_client import GenericEnvClient
    except ImportError as err:
        raise PluginError("environment.name = OpenEnvEnv needs openenv-core: "
                          "pip install --no-deps -r requirements-envs.txt") from err
    return GenericEnvClient


def discover_tools(url: str, tool_name: str = "step", timeout_s: float = 30.0) -> tuple[bool, list[dict]]:
    """(is_mcp, tool schemas) of the server at `url`, asked once per process."""
    key = (url, tool_name)
    with _TOOLS_LOCK:
        if key not in _TOOLS:
            _TOOLS[key] = _ask_tools(url, tool_name, timeout_s)
        return _TOOLS[key]


def _ask_tools(url: str, tool_name: str, timeout_s: float) -> tuple[bool, list[dict]]:
    try:
        action = httpx.get(f"{url}/schema", timeout=timeout_s).raise_for_status().json()["action"]
        props = action.get("properties", {})
        if props.get("type", {}).get("const") == "call_tool":
            listing = httpx.post(f"{url}/step", json={"action": {"type": "list_tools"}}, timeout=timeout_s)
            tools = listing.raise_for_status().json()["observation"]["tools"]
            return True, [{"type": "function", "function": {
                "name": t["name"], "description": t.get("description") or "",
                "parameters": t.get("input_schema") or t.get("inputSchema") or {"type": "object", "properties": {}}}}
                for t in tools]
    except (httpx.HTTPError, KeyError, ValueError) as err:
        raise PluginError(f"environment.args.url '{url}': not an OpenEnv server answering /schema: {err}") from err
    params = {"type": "object", "required": [r for r in action.get("required", []) if r != "metadata"],
              "properties": {k: v for k, v in props.items() if k != "metadata"}}
    description = action.get("description") or f"Act in the {action.get('title', 'environment')}."
    return False, [{"type": "function", "function": {"name": tool_name, "description": description,
                                                     "parameters": params}}]


def observation_text(observation: dict[str, Any], key: str = "") -> str:
    """A step's observation as the text the model reads."""
    if key:
        value = observation.get(key, "")
        return value if isinstance(value, str) else json.dumps(value, default=str)
    if "tool_name" in observation and ("result" in observation or "error" in observation):  # MCP call result
        if observation.get("error"):
            return f"Error: {observation['error'].get('message', observation['error'])}"
        result = observation.get("result") or {}
        if isinstance(result, dict):
            data = result.get("data")
            if data is not None:
                return data if isinstance(data, str) else json.dumps(data, default=str)
            return "".join(p.get("text", "") for p in result.get("content") or [] if isinstance(p, dict))
        return str(result)
    fields = {k: v for k, v in observation.items() if k not in _OBSERVATION_BOOKKEEPING}
    if len(fields) == 1:
        (value,) = fields.values()
        return value if isinstance(value, str) else json.dumps(value, default=str)
    return json.dumps(fields, default=str) if fields else ""


class OpenEnvEnv(Environment):
    """An OpenEnv server's environment; every episode is its own session on it."""

    @classmethod
    def requirements(cls, cfg: Any) -> list[str]:
        if importable("openenv.core"):
            return []
        return ["environment.name = OpenEnvEnv needs openenv-core: pip install --no-deps -r requirements-envs.txt"]

    def __init__(self, url: str, tool_name: str = "step", reward: Literal["sum", "last"] = "sum",
                 observation_key: str = "", max_sessions: int = 0, connect_timeout_s: float = 10.0,
                 message_timeout_s: float = 60.0):
        if reward not in ("sum", "last"):
            raise PluginError(f"environment.args.reward must be 'sum' or 'last', got {reward!r}")
        self.url, self.tool_name, self.reward_mode = url.rstrip("/"), tool_name, reward
        self.observation_key = observation_key
        self.timeouts = (connect_timeout_s, message_timeout_s)
        self.max_sessions = max_sessions
        self.session: asyncio.Semaphore | None = None
        self.client: Any = None
        self.rewards: list[float] = []
        self.steps = 0

    async def reset(self, row: dict) -> list[dict]:
        self.is_mcp, self.schemas = await asyncio.to_thread(discover_tools, self.url, self.tool_name)
        if self.max_sessions > 0:  # one rollout event loop per process: a semaphore per server
            key = f"{self.url} {id(asyncio.get_running_loop())}"
            self.session = _SESSIONS.setdefault(key, asyncio.Semaphore(self.max_sessions))
            await self.session.acquire()
        result = await self._open_session(dict(row.get("reset") or {}))
        prompt = row.get("prompt", "")
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]
        shown = observation_text(result.observation or {}, self.observation_key)
        if shown:
            messages[-1]["content"] = f"{messages[-1]['content']}\n\n{shown}".lstrip()
        return messages

    async def _open_session(self, reset_kwargs: dict):
        """Connect and reset; a server at capacity is asked again until connect_timeout_s."""
        deadline = time.monotonic() + self.timeouts[0]
        while True:
            self.client = _client_class()(base_url=self.url, connect_timeout_s=self.timeouts[0],
                                          message_timeout_s=self.timeouts[1])
            try:
                return await self.client.reset(**reset_kwargs)
            except RuntimeError as err:
                await self.client.close()
                self.client = None
                if "CAPACITY_REACHED" not in str(err):
                    raise
                if time.monotonic() > deadline:
                    raise RuntimeError(f"OpenEnv server {self.url} stayed at capacity for {self.timeouts[0]:g}s: "
                                       f"raise its max_concurrent_envs, or set environment.args.max_sessions "
                                       f"to what it allows") from err
            await asyncio.sleep(0.1)

    def offered_tools(self) -> list[dict]:
        return self.schemas if self.client is not None else discover_tools(self.url, self.tool_name)[1]

    async def call_tool(self, call: ToolCall, timeout_s: float) -> str:
        names = [s["function"]["name"] for s in self.schemas]
        if call.name not in names:
            return f"Error: no tool named {call.name!r}; the tools are {', '.join(names)}"
        action = ({"type": "call_tool", "tool_name": call.name, "arguments": call.arguments}
                  if self.is_mcp else dict(call.arguments))
        try:
            result = await asyncio.wait_for(self.client.step(action), timeout_s)
        except asyncio.TimeoutError:
            return f"Error: {call.name} timed out after {timeout_s:g}s"
        except Exception as err:  # the server refused the action (bad arguments, ...): the model reads why
            return f"Error: {call.name} failed: {err}"
        self.steps += 1
        self.rewards.append(float(result.reward or 0.0))
        if result.done:
            self.done, self.end_reason = True, "env_done"
        return observation_text(result.observation or {}, self.observation_key)

    def reward(self) -> tuple[float, dict]:
        if not self.rewards:
            return 0.0, {"steps": 0, "reason": "no step was taken"}
        total = sum(self.rewards) if self.reward_mode == "sum" else self.rewards[-1]
        return total, {"steps": self.steps}

    def info(self) -> dict[str, Any]:
        return {"openenv": {"steps": self.steps, "rewards": self.rewards[-8:]}}

    async def close(self) -> None:
        try:
            if self.client is not None:
                await self.client.close()
        finally:
            if self.session is not None:
                self.session.release()
                self.session = None
