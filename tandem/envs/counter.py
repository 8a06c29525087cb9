"""counter: call a tool exactly `target` times, then stop.

The prompt names the target (1-3); `increment()` adds one to a counter and answers how many
calls are still missing. The episode ends when the model replies without a tool call. The
reward is 1 for the exact count and 0 otherwise, decided turns after the calls that earn it:
each turn's call-or-stop decision shares the episode's credit, and stopping right needs the
tool's answer read.

`partial_credit = True` scores 1 - |count - target| / target instead. It is a trap for a
tiny model: stopping after one call then scores about 0.61 on targets 1-3, a policy that
collapses there gives every sample of a group the same reward and GRPO no gradient (measured:
one of two runs stayed at 0.58 for 200 steps); exact credit reached the success level at steps
59, 74, 76 and 81 in four runs (bench/results/env_learning.md has two of them). Over more seeds
exact credit has its own trap: a policy that calls a fixed number of times whatever the target gets
equal rewards in every group too (8 of 18 runs reached the level; docs/performance.md, "Learning
under load").
"""

from __future__ import annotations

from typing import Any

from tandem.env import Environment


class Counter(Environment):
    def __init__(self, partial_credit: bool = False):
        self.partial_credit = partial_credit

    def reset(self, row: dict) -> str:
        self.target, self.count = int(row["target"]), 0
        if self.target < 1:
            raise ValueError(f"target must be at least 1, got {self.target}")
        return str(row["prompt"])

    def increment(self) -> str:
        """Add one to the counter and return how many calls are still missing."""
        self.count += 1
        return str(max(0, self.target - self.count))

    def reward(self) -> tuple[float, dict]:
        exact = float(self.count == self.target)
        score = max(0.0, 1.0 - abs(self.count - self.target) / self.target) if self.partial_credit else exact
        info: dict[str, Any] = {"count": self.count, "target": self.target}
        if score == 0:
            info["reason"] = f"called increment {self.count} times for a target of {self.target}"
        return score, info

    def info(self) -> dict:
        return {"counter": {"count": self.count, "target": self.target}}

    @staticmethod
    def step_metrics(samples) -> dict[str, float]:
        if not samples:
            return {}
        exact = [s.metadata.get("counter", {}).get("count") == s.metadata.get("counter", {}).get("target")
                 for s in samples]
        return {"counter_exact_rate": sum(exact) / len(samples)}
