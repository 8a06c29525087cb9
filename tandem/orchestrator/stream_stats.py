"""Per-step metrics of streaming rollouts: how old the trained tokens are, and whether taking
the first finished groups biases training towards short trajectories.

Length bias. A step trains on groups that finished first, and short trajectories finish first.
Per step we log the mean turns and model tokens of the samples trained on, the same means over
every trajectory that ended since the previous step (the window: finished, trained or not, and
cancelled as too old, counted with the turns and tokens it had reached), and their ratio
`length_bias_turns` / `length_bias_tokens` (1.0 = no bias; 1.0 too when nothing ended in the
window). The producer's remedy is to take finished groups oldest-admitted first.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from tandem.sample import Sample


def turns_of(sample: Sample) -> int:
    """Model turns: runs of trained-on tokens in the response (a single-turn sample has one)."""
    runs, prev = 0, 0
    for m in sample.loss_mask:
        runs += 1 if m and not prev else 0
        prev = m
    return runs


def token_lags(step: int, samples: list[Sample]) -> list[int]:
    """step - version, for every trained-on token."""
    return [step - v for s in samples for v in s.model_token_versions()]


def lag_histogram(lags: list[int], staleness: int) -> dict[str, float]:
    """Fractions of trained tokens per lag 0..S (they sum to 1: the staleness rule bounds every
    token's lag by S), their mean and max."""
    n = max(len(lags), 1)
    hist = {f"token_lag_{d}": sum(1 for x in lags if x == d) / n for d in range(staleness + 1)}
    return {**hist, "token_lag_mean": sum(lags) / n, "token_lag_max": float(max(lags, default=0))}


@dataclass
class StreamWindow:
    """What happened between two steps' takes."""
    recycled: int = 0
    turns: list[int] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    cancelled_groups: int = 0
    cancelled_samples: int = 0

    def finished(self, group) -> None:
        for s in group.samples:
            self.turns.append(turns_of(s))
            self.tokens.append(s.num_model_tokens)

    def cancelled(self, progress, group_size: int) -> None:
        """A group cancelled as too old counts too, each sample with the turns and tokens the group
        had reached per sample (a lower bound: cancelled trajectories are the long ones)."""
        self.cancelled_groups += 1
        self.cancelled_samples += group_size
        self.turns.extend([progress.answers / group_size] * group_size)
        self.tokens.extend([progress.tokens / group_size] * group_size)

    def stats(self, step: int, samples: list[Sample], staleness: int, *, buffered: int, running: int,
              admission_lags: list[int]) -> dict[str, float]:
        trained_turns = statistics.fmean(turns_of(s) for s in samples)
        trained_tokens = statistics.fmean(s.num_model_tokens for s in samples)
        done_turns = statistics.fmean(self.turns) if self.turns else trained_turns
        done_tokens = statistics.fmean(self.tokens) if self.tokens else trained_tokens
        return {
            **lag_histogram(token_lags(step, samples), staleness),
            "trained_turns_mean": trained_turns, "finished_turns_mean": done_turns,
            "trained_tokens_mean": trained_tokens, "finished_tokens_mean": done_tokens,
            "length_bias_turns": trained_turns / done_turns if done_turns else 1.0,
            "length_bias_tokens": trained_tokens / done_tokens if done_tokens else 1.0,
            "finished_in_window": float(len(self.turns) - self.cancelled_samples),
            "cancelled_in_window": float(self.cancelled_groups),
            "buffered_groups": float(buffered), "running_groups": float(running),
            "admission_lag_mean": statistics.fmean(admission_lags) if admission_lags else 0.0,
        }
