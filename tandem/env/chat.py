"""Token bookkeeping for multi-turn trajectories: extend ids, never re-tokenize text.

A trajectory is one token sequence. Turn k's prompt is exactly turn k-1's prompt plus
the engine's output ids (trained on, mask 1) plus the ids that close that assistant turn
and wrap the observation as the next user turn (mask 0). Only those wrapper ids are ever
tokenized, and only as a fresh segment that starts right after a special token, so they
tokenize the same as they do inside a full chat-template rendering.

How the wrapper is learned from the tokenizer's own chat template: render the probe
conversation [system, user, assistant=A, R=O1, R=O2] (R: the observations' role, "user"
or "tool") with the generation prompt and read the text between A and O1 (assistant close
+ observation open, e.g. "<|im_end|>\\n<|im_start|>user\\n"), between O1 and O2, and after
O2 (observation close + generation prompt). No template format is hard-coded.

The engine's output ids end with the eos token (<|im_end|> for Qwen) when the model
stopped by itself; the wrapper then starts after that token ("\\n<|im_start|>user\\n..."),
the "\\n" being a template token the model never generated (mask 0). When the model was
cut off (max_new_tokens), the whole close is appended, also with mask 0.

Known, unavoidable differences from re-rendering the finished conversation with
apply_chat_template (tests/test_agent_tokens.py pins the first two exactly):
- the trajectory ends with the last output ids; the template's trailing "\\n" after the
  final <|im_end|> is not part of it (nothing follows, and the model never produced it);
- a reply cut off by max_new_tokens has template-closing tokens appended that a
  re-rendering would also produce, but the text may tokenize differently at the cut;
- with BPE vocabularies the model may sample a non-canonical segmentation of its text;
  the trajectory keeps the sampled ids (what the policy actually produced), a
  re-tokenization would not;
- templates that rewrite history (Qwen3 drops <think>...</think> from earlier assistant
  turns and adds an empty think block to the generation prompt when thinking is off)
  render earlier turns differently from what the model saw while generating. The
  trajectory keeps what the model saw.
"""

from __future__ import annotations

from typing import Any

_A = "\u27e6TANDEM_ASSISTANT\u27e7"
_O = "\u27e6TANDEM_OBSERVATION\u27e7"


class ChatFormat:
    def __init__(self, tokenizer: Any, template_kwargs: dict | None = None, tools: list[dict] | None = None):
        self.tok = tokenizer
        self.kwargs = dict(template_kwargs or {})
        if tools:
            self.kwargs["tools"] = list(tools)
        self.eos_id = tokenizer.eos_token_id
        self.eos_text = tokenizer.decode([self.eos_id]) if self.eos_id is not None else ""
        self._wrappers: dict[str, tuple[str, str, str]] = {}

    def wrappers(self, role: str) -> tuple[str, str, str]:
        """(between, separator, after) for observations in `role`, read off the template once.

        between: closes an assistant turn and opens the first observation; separator: between
        two observations of one turn (Qwen merges tool results into one user turn); after:
        closes the last observation and opens the next assistant turn."""
        if role not in self._wrappers:
            probe = self.render([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                                 {"role": "assistant", "content": _A}, {"role": role, "content": _O + "1"},
                                 {"role": role, "content": _O + "2"}], add_generation_prompt=True)
            a, o1, o2 = probe.find(_A), probe.find(_O + "1"), probe.find(_O + "2")
            if min(a, o1, o2) < 0 or not a < o1 < o2 or probe.count(_A) != 1:
                raise ValueError(f"the chat template does not render {role!r} message contents verbatim; "
                                 f"cannot derive the turn wrapper")
            self._wrappers[role] = (probe[a + len(_A):o1], probe[o1 + len(_O) + 1:o2], probe[o2 + len(_O) + 1:])
        return self._wrappers[role]

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                            **self.kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The first prompt: the template's own tokenization, generation prompt included."""
        return list(self.tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                 return_dict=False, **self.kwargs))

    def continuation_ids(self, output_ids: list[int], observations: list[dict]) -> list[int]:
        """Ids that follow a model turn: close it (minus the eos it emitted), the observations (all of
        one role: the tool results of one turn, or one user message), the next generation prompt."""
        roles = {m["role"] for m in observations}
        if len(roles) != 1:
            raise ValueError(f"one turn's observations must share one role, got {sorted(roles)}")
        between, separator, after = self.wrappers(roles.pop())
        if output_ids and output_ids[-1] == self.eos_id and self.eos_text and between.startswith(self.eos_text):
            between = between[len(self.eos_text):]
        return self.encode(between + separator.join(str(m["content"]) for m in observations) + after)

    def decode(self, ids: list[int]) -> str:
        """The reply's text; tool-call markers (<tool_call>, tool tokens) are ordinary added tokens and stay."""
        return self.tok.decode(ids, skip_special_tokens=True)
