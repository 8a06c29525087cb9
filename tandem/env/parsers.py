"""Tool calls read from a model's reply, in the model family's own format.

- hermes       Qwen2.5 / Qwen3 / Hermes: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`,
               one JSON object per block (what SGLang's `--tool-call-parser qwen25` reads);
- tool_tokens  the tiny model's format: tokenizer token `<|tool_k|>` calls the k-th tool of the
               environment, optionally followed by a JSON object of arguments. A random tiny model
               emits one given token by chance (about 1 in 260 per position); it never emits a
               40-byte JSON call, so on the tiny model tool use could never be discovered.

A block that does not parse is not dropped: it becomes an error the model sees as that call's
result, and counts as a format error of the turn.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

TOOL_TOKEN = re.compile(r"<\|tool_(\d+)\|>")
HERMES_BLOCK = re.compile(r"<tool_call>(.*?)(</tool_call>|$)", re.DOTALL)
CALL_OPENERS = ("<tool_call>", "<|tool_")
"""What begins a tool call in each format (a streamed reply holds its text back from there)."""


@dataclass
class ToolCall:
    name: str
    arguments: dict[str, Any]


@dataclass
class ParsedReply:
    text: str
    """The whole reply, tool-call markup included (what the assistant message holds)."""
    calls: list[ToolCall] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    """One message per malformed call, answered to the model as that call's result."""
    finish_reason: str = ""
    """Why the engine stopped this reply ('stop', 'length', ...), set by the loop."""

    @property
    def content(self) -> str:
        """The reply without its tool-call markup: the final answer when there are no calls."""
        return TOOL_TOKEN.sub("", HERMES_BLOCK.sub("", self.text)).strip()


def _arguments(raw: Any) -> dict[str, Any]:
    # Some models write the arguments as a JSON string rather than an object.
    if isinstance(raw, str):
        raw = json.loads(raw) if raw.strip() else {}
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"arguments must be a JSON object, got {type(raw).__name__}")
    return raw


def parse_hermes(text: str, tool_names: list[str]) -> ParsedReply:
    reply = ParsedReply(text)
    for body, close in HERMES_BLOCK.findall(text):
        if not close:
            reply.errors.append("the <tool_call> block was not closed with </tool_call>")
            continue
        try:
            call = json.loads(body.strip())
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ValueError('expected {"name": ..., "arguments": {...}}')
            reply.calls.append(ToolCall(call["name"], _arguments(call.get("arguments", call.get("parameters")))))
        except ValueError as err:  # json.JSONDecodeError is a ValueError
            reply.errors.append(f"invalid tool call {body.strip()[:200]!r}: {err}")
    return reply


def parse_tool_tokens(text: str, tool_names: list[str]) -> ParsedReply:
    reply = ParsedReply(text)
    matches = list(TOOL_TOKEN.finditer(text))
    for i, match in enumerate(matches):
        index = int(match.group(1))
        tail = text[match.end(): matches[i + 1].start() if i + 1 < len(matches) else len(text)].lstrip()
        if index >= len(tool_names):
            reply.errors.append(f"<|tool_{index}|> calls no tool: there are {len(tool_names)}")
            continue
        arguments: dict[str, Any] = {}
        if tail.startswith("{"):
            try:
                arguments, _ = json.JSONDecoder().raw_decode(tail)
                arguments = _arguments(arguments)
            except ValueError as err:
                reply.errors.append(f"invalid arguments for {tool_names[index]}: {err}")
                continue
        reply.calls.append(ToolCall(tool_names[index], arguments))
    return reply


PARSERS = {"hermes": parse_hermes, "tool_tokens": parse_tool_tokens}


def pick_parser(setting: str, tokenizer: Any):
    """environment.tool_parser -> the parse function; 'auto' picks tool tokens when the tokenizer has them."""
    if setting == "auto":
        vocab = tokenizer.get_vocab()
        setting = "tool_tokens" if "<|tool_0|>" in vocab else "hermes"
    return PARSERS[setting]
