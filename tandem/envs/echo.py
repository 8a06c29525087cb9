"""The default task's reward (echo a digit), and exact match for question-answer data.

A reward plug-in is `fn(sample: Sample, row: dict) -> float | (float, dict)`, sync or
async, named in config as `rollout.reward = "module:function"` or `"file.py:function"`.
It sees the finished sample (response text, token ids, metadata a rollout attached) and
the dataset row (labels, hidden tests). The info dict is kept in `sample.reward_info`;
put a "reason" there for any 0. A reward that raises or outlives
`rollout.reward_timeout_s` scores 0 with the reason recorded; the run goes on.
"""

from __future__ import annotations

from typing import Any

from tandem.sample import Sample


def echo_reward(sample: Sample, row: dict) -> tuple[float, dict]:
    """The default task: answer with the prompt's digit, repeated `length` times.

    Partial credit per position gives a tiny random model a gradient to climb: the reward
    is the fraction of the first `length` response characters equal to the label.
    """
    label = str(row["label"])
    length = int(row.get("length", 8))
    text = sample.response_text
    hits = sum(1 for i in range(length) if i < len(text) and text[i] == label)
    info: dict[str, Any] = {"hits": hits}
    if hits == 0:
        info["reason"] = f"no '{label}' in the first {length} characters"
    return hits / length, info


def exact_match_reward(sample: Sample, row: dict) -> float:
    """1 if the stripped response equals the row's label, else 0 (a common plug-in for QA data)."""
    return float(sample.response_text.strip() == str(row["label"]).strip())


__all__ = ["echo_reward", "exact_match_reward"]
