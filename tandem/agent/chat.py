"""Token bookkeeping for multi-turn trajectories: extend ids, never re-tokenize text.

A trajectory is one token sequence. Turn k's prompt is exactly turn k-1's prompt plus
the engine's output ids (trained on, mask 1) plus the ids that close that assistant turn
and wrap the observation as the next user turn (mask 0). Only those wrapper ids are ever
tokenized, and only as a fresh segment that starts right after a special token, so they
tokenize the same as they do inside a full chat-template rendering.

How the wrapper is learned from the tokenizer's own chat template: render the probe
conversation [system, user, assistant=A, user=O] with the generation prompt and read the
text between A and O (assistant close + user open, e.g. "<|im_end|>\\n<|im_start|>user\\n")
and after O (user close + generation prompt). No template format is hard-coded.

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
    def __init__(self, tokenizer: Any, template_kwargs: dict | None = None):
        self.tok = tokenizer
        self.kwargs = dict(template_kwargs or {})
        probe = self.render([{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                             {"role": "assistant", "content": _A}, {"role": "user", "content": _O}],
                            add_generation_prompt=True)
        if probe.count(_A) != 1 or probe.count(_O) != 1 or probe.index(_A) > probe.index(_O):
            raise ValueError("the chat template does not render message contents verbatim; "
                             "cannot derive the turn wrapper")
        self.between = probe[probe.index(_A) + len(_A): probe.index(_O)]
        """Text closing an assistant turn and opening the next user turn."""
        self.after = probe[probe.index(_O) + len(_O):]
        """Text closing the user turn plus the generation prompt."""
        self.eos_id = tokenizer.eos_token_id
        self.eos_text = tokenizer.decode([self.eos_id]) if self.eos_id is not None else ""

    def render(self, messages: list[dict], add_generation_prompt: bool = False) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                            **self.kwargs)

    def encode(self, text: str) -> list[int]:
        return list(self.tok.encode(text, add_special_tokens=False))

    def prompt_ids(self, messages: list[dict]) -> list[int]:
        """The first prompt: the template's own tokenization, generation prompt included."""
        return list(self.tok.apply_chat_template(messages, tokenize=True, add_generation_prompt=True,
                                                 return_dict=False, **self.kwargs))

    def continuation_ids(self, output_ids: list[int], observation: str) -> list[int]:
        """Ids that follow a model turn: close it (minus the eos it emitted), the observation, the next prompt."""
        between = self.between
        if output_ids and output_ids[-1] == self.eos_id and self.eos_text and between.startswith(self.eos_text):
            between = between[len(self.eos_text):]
        return self.encode(between + observation + self.after)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)
