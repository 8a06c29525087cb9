"""What one harness trajectory sent and got: its recorded calls, and how each call's prompt is built.

A harness sends chat messages; the engine sees token ids. The endpoint applies the chat template
itself, so it knows exactly which ids each call's prompt was, and builds them so that a harness
that keeps its history gets prompts that extend the previous call's prompt + completion token for
token: when a request's messages start with an earlier call's messages followed by the reply the
endpoint returned for it, the prompt is that call's prompt ids + its completion ids (what the model
sampled, never re-tokenised) + the ids of what follows, rendered from the template as
tandem.env.chat renders observations. Any other request (a rewritten history: summarised, truncated,
an edited reply) is rendered whole; tandem.harness.trajectory then starts a new segment for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

_A = "\u27e6TANDEM_REPLY\u27e7"


@dataclass
class CapturedCall:
    """One call as the engine served it: the ids it got and the ids, log-probs and version it returned."""

    kind: str
    """'chat' (/v1/chat/completions) or 'completion' (/v1/completions)."""
    prompt_ids: list[int]
    output_ids: list[int]
    logprobs: list[float]
    version: int
    """The oldest weight version the completion's tokens may come from."""
    finish_reason: str
    text: str
    """The completion as decoded for the harness."""
    extended: bool
    """The prompt was built on an earlier call's prompt + completion (the harness kept its history)."""
    messages: list[tuple] = field(default_factory=list)
    """Chat calls: the request's messages, normalised (for matching the next request against)."""
    reply: tuple = ()
    """Chat calls: the reply message the harness was sent, normalised."""
    raw_messages: list[dict] = field(default_factory=list)
    tools_key: str = ""
    prompt_text: str = ""
    """Completion calls: the prompt text the harness sent."""
    finished_on: int = 0
    """The version the engine finished on (newer than `version` when weights changed meanwhile)."""
    choice: int = 0
    """Which of the request's n choices this is (each choice is recorded as a call of its own)."""

    def summary(self) -> dict[str, Any]:
        """What the inspector and metadata keep of the call (no token lists: the sample holds them)."""
        return {"kind": self.kind, "prompt_tokens": len(self.prompt_ids), "completion_tokens": len(self.output_ids),
                "version": self.version, "finished_on": self.finished_on, "finish_reason": self.finish_reason,
                "extended": self.extended,
                "choice": self.choice, "text": self.text[:400]}


def message_text(content: Any) -> str:
    """OpenAI content (a string, None, or content parts) as the text the template renders."""
    if content is None:
        return ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content
                       if isinstance(p, dict) and p.get("type") in ("text", "input_text", "output_text"))
    return str(content)


def _arguments(raw: Any) -> Any:
    if isinstance(raw, str):
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            return raw
    return raw if raw is not None else {}


def template_message(message: dict) -> dict:
    """An OpenAI message as chat templates take it: text content, tool-call arguments as objects."""
    if not isinstance(message, dict) or "role" not in message:
        raise ValueError("every message needs a role")
    out = {k: v for k, v in message.items() if v is not None}
    out["content"] = message_text(message.get("content"))
    if message.get("tool_calls"):
        out["tool_calls"] = [{**c, "function": {**c.get("function", {}),
                                                "arguments": _arguments(c.get("function", {}).get("arguments"))}}
                             for c in message["tool_calls"]]
    return out


def normalised(message: dict) -> tuple:
    """What two messages must share to be the same turn: role, text, and tool calls (name, arguments).
    Call ids and fields the client adds (refusal, annotations, ...) do not count."""
    calls = tuple((c.get("function", {}).get("name", ""),
                   json.dumps(_arguments(c.get("function", {}).get("arguments")), sort_keys=True))
                  for c in message.get("tool_calls") or [])
    return (message.get("role", ""), message_text(message.get("content")).strip(), calls)


class ChatPrompts:
    """Chat-template rendering for one tokenizer (tandem.env.chat's rules, any messages after a reply)."""

    def __init__(self, tokenizer: Any, template_kwargs: dict | None = None):
        self.tok = tokenizer
        self.kwargs = dict(template_kwargs or {})
        self.eos_id = tokenizer.eos_token_id
        self.eos_text = tokenizer.decode([self.eos_id]) if self.eos_id is not None else ""

    def _render(self, messages: list[dict], tools: list[dict] | None, tokenize: bool) -> Any:
        kwargs = {**self.kwargs, **({"tools": tools} if tools else {})}
        return self.tok.apply_chat_template(messages, tokenize=tokenize, add_generation_prompt=True,
                                            return_dict=False, **kwargs)

    def whole(self, messages: list[dict], tools: list[dict] | None) -> list[int]:
        """The template's own tokenization of the conversation, generation prompt included."""
        ids = self._render(messages, tools, True)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def after_reply(self, before: list[dict], output_ids: list[int], following: list[dict],
                    tools: list[dict] | None) -> list[int]:
        """The ids that follow a reply the model sampled: its turn's close (minus the eos it emitted),
        the `following` messages, the next generation prompt. Read off the template by rendering a
        marker in the reply's place, so no template format is hard-coded."""
        text = self._render([*before, {"role": "assistant", "content": _A}, *following], tools, False)
        if text.count(_A) != 1:
            raise ValueError("the chat template does not render an assistant reply verbatim")
        tail = text[text.index(_A) + len(_A):]
        if output_ids and output_ids[-1] == self.eos_id and self.eos_text and tail.startswith(self.eos_text):
            tail = tail[len(self.eos_text):]
        return list(self.tok.encode(tail, add_special_tokens=False))


def chat_prompt(calls: list[CapturedCall], prompts: ChatPrompts, messages: list[dict],
                tools: list[dict] | None) -> tuple[list[int], bool]:
    """(prompt ids, extended?) for a chat request, given the trajectory's calls so far."""
    templated = [template_message(m) for m in messages]
    norm = [normalised(m) for m in messages]
    key = tools_key(tools)
    for call in reversed(calls):
        if call.kind != "chat" or call.tools_key != key:
            continue
        head = [*call.messages, call.reply]
        if len(norm) > len(head) and norm[:len(head)] == head:
            tail = prompts.after_reply(call.raw_messages, call.output_ids, templated[len(head):], tools)
            return call.prompt_ids + call.output_ids + tail, True
    return prompts.whole(templated, tools), False


def completion_prompt(calls: list[CapturedCall], tokenizer: Any, prompt: Any) -> tuple[list[int], bool, str]:
    """(prompt ids, extended?, prompt text) for a /v1/completions prompt: token ids as sent; text that
    continues an earlier call's prompt + completion reuses that call's ids and encodes only the rest."""
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
        prompt = prompt[0]
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return list(prompt), False, ""
    if not isinstance(prompt, str):
        raise ValueError("prompt must be one string or one list of token ids (each call is one trajectory step)")
    for call in reversed(calls):
        if call.kind != "completion" or not call.prompt_text:
            continue
        if tokenizer.decode(call.output_ids, skip_special_tokens=False) != call.text:
            continue  # the harness never saw some of the sampled ids (an eos): its text is not their text
        before = call.prompt_text + call.text
        if prompt.startswith(before) and len(prompt) > len(before):
            rest = list(tokenizer.encode(prompt[len(before):], add_special_tokens=False))
            return call.prompt_ids + call.output_ids + rest, True, prompt
    return list(tokenizer.encode(prompt, add_special_tokens=False)), False, prompt


def tools_key(tools: list[dict] | None) -> str:
    return json.dumps(tools or [], sort_keys=True, default=str)
