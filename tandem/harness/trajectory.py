"""A harness trajectory's recorded calls rebuilt into training samples, from the token ids alone.

Calls are taken in the order they were made. A call whose prompt ids start with the whole token
sequence of a segment so far (its prompt + completions + what came between) extends that segment:
the ids between are context (mask 0, log-prob 0), the completion's ids are the model's (mask 1,
the engine's log-probs and weight version). A call that extends no segment (the harness rewrote
its history: summarised, truncated, edited a reply; or branched) opens a new segment with its own
prompt, and is counted as a prefix break. The choices of a call that asked for n > 1 are recorded as
calls of their own, in choice order: the first goes where the call goes, each other one opens a
segment of its own on the same prompt (a branch, counted apart from prefix breaks), and a later call
that continues from a choice's reply extends that choice's segment. Every sampled token is trained
exactly once, in the segment of the call that sampled it, and nothing the model did not sample is
ever trained on.
"""

from __future__ import annotations

from dataclasses import dataclass

from tandem.harness.capture import CapturedCall
from tandem.sample import Sample


@dataclass
class Rebuilt:
    samples: list[Sample]
    """One per segment, in the order the segments were opened."""
    segment_of_call: list[int]
    """For each call, the segment it went into."""
    branches: int = 0
    """Segments opened by a choice other than the first of an n > 1 call."""

    @property
    def prefix_breaks(self) -> int:
        """Calls other than a call's later choices that extended no earlier segment, after the first
        (0: the harness kept its history)."""
        return len(self.samples) - 1 - self.branches


def _extends(tokens: list[int], prompt: list[int]) -> bool:
    return len(prompt) >= len(tokens) and prompt[:len(tokens)] == tokens


def rebuild(calls: list[CapturedCall]) -> Rebuilt:
    """Segments of a trajectory: each a Sample with exact masks, log-probs and per-token versions."""
    if not calls:
        raise ValueError("a trajectory with no model call has nothing to train on")
    samples: list[Sample] = []
    segment_of_call: list[int] = []
    branches = 0
    for call in calls:
        # The longest segment the prompt extends (a side query must not capture the main thread's next call).
        candidates = [i for i, s in enumerate(samples) if _extends(s.tokens, call.prompt_ids)]
        if candidates:
            index = max(candidates, key=lambda i: len(samples[i].tokens))
            sample = samples[index]
            sample.append_context_tokens(call.prompt_ids[len(sample.tokens):])
        else:
            index, branches = len(samples), branches + (call.choice > 0)
            sample = Sample(prompt_ids=list(call.prompt_ids), weight_version=call.version)
            samples.append(sample)
        sample.append_model_tokens(call.output_ids, call.logprobs, call.version)
        sample.weight_version = min(sample.weight_version, call.version)
        sample.finish_reason = call.finish_reason
        sample.response_text = call.text
        sample.metadata["finish_weight_version"] = max(sample.metadata.get("finish_weight_version", 0),
                                                       call.finished_on)
        segment_of_call.append(index)
    return Rebuilt(samples, segment_of_call, branches)
