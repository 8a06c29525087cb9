"""The environment contract: a class with reset(row), tools as typed methods, and a reward.

    class Lookup(Environment):
        def reset(self, row):                 # the first user message (or a list of messages)
            self.secret = row["secret"]
            return "What is the secret?"

        def lookup(self) -> str:              # a tool: public, type-hinted, documented
            \"\"\"Return the secret.\"\"\"
            return self.secret

        def reward(self) -> float:            # scores the finished episode
            return float(self.answer == self.secret)

Tools are the public methods a subclass defines (names in RESERVED are the contract's own).
Their JSON schemas come from the type hints and the docstring's "Args:" section
(tandem.env.tool_schema: the schemas of transformers.utils.get_json_schema, as TRL's
environment_factory writes them, without importing transformers), and go to the chat template
as `tools`. Any method may be `async def`; a plain one runs on the rollout
thread pool, never on the event loop.

An episode ends when the model replies without a tool call (its reply is the answer, in
`self.answer`), when a tool or step sets `self.done` (with `self.end_reason`), or on the
loop's limits (environment.max_turns / max_context_tokens / wall_time_s).

An environment that reads free text instead of tool calls defines `step(text)`: it gets
each reply and returns the next user message, or None (or sets `self.done`) to end.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import Awaitable
from typing import Any, Callable, ClassVar

from pydantic import BaseModel

from tandem.env.parsers import ParsedReply, ToolCall
from tandem.env.tool_schema import ToolSchemaError, tool_schema
from tandem.config import validate_section
from tandem.rollout.context import RolloutContext
from tandem.rollout.plugins import PluginError, RewardResult, load_plugin


RESERVED = frozenset({"reset", "step", "respond", "reward", "info", "close", "tools", "tool_schemas",
                      "step_metrics", "call_tool", "call", "text_mode", "offered_tools", "requirements", "Args"})
"""Method names of the contract itself; never offered to the model as tools."""


class Environment:
    Args: ClassVar[type[BaseModel] | None] = None
    """The model of environment.args, for an environment that types its arguments: they are then
    checked before anything starts (each bad key named environment.args.KEY) and the environment
    is built with `args=` the validated model. None: environment.args are passed as keyword
    arguments as written."""
    ctx: RolloutContext | None = None
    """The run's RolloutContext (config, tokenizer, thread pool), set before reset."""
    done: bool = False
    """Set by a tool or step to end the episode after this turn."""
    end_reason: str = "done"
    """Why the episode ended when `done` was set (e.g. 'submitted'); reported per step."""
    format_errors: int = 0
    """Malformed replies or tool calls so far (counted by respond; reported per step)."""
    answer: str = ""
    """The model's answer: the text of its reply that called no tool (empty until it gives one)."""

    def reset(self, row: dict) -> str | list[dict] | Awaitable[str | list[dict]]:
        """Start an episode for a dataset row: the first user message, or the whole first messages."""
        raise NotImplementedError(f"{type(self).__name__} must define reset(row)")

    def reward(self) -> RewardResult | Awaitable[RewardResult]:
        """Score the finished episode: a number, or (number, info dict)."""
        raise NotImplementedError(f"{type(self).__name__} must define reward()")

    def info(self) -> dict[str, Any] | Awaitable[dict[str, Any]]:
        """Extra per-sample metadata kept with the sample (JSON-serialisable)."""
        return {}

    def close(self) -> None | Awaitable[None]:
        """Release what reset acquired; called once per episode, even after a failure."""

    @classmethod
    def requirements(cls, cfg: Any) -> list[str]:
        """What stops a run of this environment before any process starts (a package, a sandbox
        backend), one problem per line naming its fix; the launcher's preflight reports them."""
        return []

    @classmethod
    def tools(cls) -> list[str]:
        """The tool method names, in definition order (tool token k calls the k-th)."""
        names = []
        for klass in reversed(cls.__mro__):
            if klass in (Environment, object):
                continue
            names += [n for n, v in vars(klass).items()
                      if callable(v) and not n.startswith("_") and n not in RESERVED and n not in names]
        return names

    @classmethod
    def tool_schemas(cls) -> list[dict]:
        """OpenAI-style function schemas for the chat template's `tools`."""
        schemas = []
        for name in cls.tools():
            try:
                schemas.append(tool_schema(getattr(cls, name)))
            except (ToolSchemaError, NameError) as err:  # NameError: a hint naming what the module lacks
                raise PluginError(f"tool {cls.__name__}.{name}: {err} (a tool needs type hints and a docstring "
                                  f"with an 'Args:' line per parameter)") from err
            schemas[-1]["function"]["parameters"]["properties"].pop("self", None)
        return schemas

    def offered_tools(self) -> list[dict]:
        """The schemas the chat template shows the model (an adapter may compute its own)."""
        return [] if self.text_mode() else self.tool_schemas()

    @classmethod
    def text_mode(cls) -> bool:
        return getattr(cls, "step", None) is not None

    async def respond(self, reply: ParsedReply, timeout_s: float, max_calls: int) -> list[dict]:
        """The observations for one reply: [] ends the episode. Adapters override this."""
        if self.text_mode():
            observation = await self.call(self.step, timeout_s, reply.text)  # type: ignore[attr-defined]
            return [] if observation is None or self.done else [{"role": "user", "content": str(observation)}]
        if not reply.calls and not reply.errors:
            self.answer = reply.content
            return []
        self.format_errors += len(reply.errors)
        results = [await self.call_tool(call, timeout_s) for call in reply.calls[:max_calls]]
        results += [f"Error: too many tool calls in one reply (at most {max_calls})"] * len(reply.calls[max_calls:])
        results += [f"Error: {error}" for error in reply.errors]
        return [{"role": "tool", "content": text} for text in results]

    async def call_tool(self, call: ToolCall, timeout_s: float) -> str:
        """One tool call's result as text; every failure is text the model reads, never an exception."""
        names = self.tools()
        if call.name not in names:
            return f"Error: no tool named {call.name!r}; the tools are {', '.join(names)}"
        method = getattr(self, call.name)
        try:
            inspect.signature(method).bind(**call.arguments)
        except TypeError as err:
            return f"Error: bad arguments for {call.name}: {err}"
        try:
            result = await self.call(method, timeout_s, **call.arguments)
        except asyncio.TimeoutError:
            return f"Error: {call.name} timed out after {timeout_s:g}s"
        except Exception as err:  # the tool's own failure is the model's observation
            return f"Error: {call.name} raised {type(err).__name__}: {err}"
        return result if isinstance(result, str) else json.dumps(result, default=str)

    async def call(self, fn: Callable, timeout_s: float | None, *args, **kwargs) -> Any:
        """Run a hook or tool: awaited when async, else on the rollout pool; bounded by timeout_s."""
        if inspect.iscoroutinefunction(fn):
            return await asyncio.wait_for(fn(*args, **kwargs), timeout_s)
        loop = asyncio.get_running_loop()
        executor = self.ctx.executor if self.ctx is not None else None
        future = loop.run_in_executor(executor, lambda: fn(*args, **kwargs))
        return await asyncio.wait_for(future, timeout_s)


def load_environment_class(spec: str) -> type[Environment]:
    """environment.name -> the class, checked: an Environment subclass with reset, reward and valid tools."""
    cls = load_plugin(spec, "environment.name")
    if not (isinstance(cls, type) and issubclass(cls, Environment)):
        raise PluginError(f"environment.name '{spec}' must name a subclass of tandem.env.Environment, "
                          f"got {cls!r}")
    for hook in ("reset", "reward"):
        if getattr(cls, hook) is getattr(Environment, hook):
            raise PluginError(f"environment.name '{spec}': {cls.__name__} must define {hook}()")
    if cls.text_mode() and cls.tools():
        raise PluginError(f"environment.name '{spec}': {cls.__name__} defines step(text) and tools "
                          f"{cls.tools()}; an environment reads either free text (step) or tool calls")
    cls.tool_schemas()  # every tool documented and typed, or refused now
    return cls


def environment_args(env_class: type, args: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments an environment is built with: environment.args as written, or for an
    environment that declares `Args`, {'args': the validated model} (a ConfigError names a bad key)."""
    model = getattr(env_class, "Args", None)
    if model is None:
        return dict(args)
    return {"args": validate_section(model, args, "environment.args.")}
