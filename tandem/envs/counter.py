"""counter: call a tool exactly `target` times, then stop.

The prompt names the target (1-3); `increment()` adds one to a counter and answers how many
calls are still missing. The episode ends when the model replies without a tool call. The
reward is 1 for the exact count and 1 - |count - target| / target (at least 0) otherwise, so
every call of the episode shares the credit of where the count ended, decided turns later.
"""

from __future__ import annotations

from tandem.env import Environment


class Counter(Environment):
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
        score = max(0.0, 1.0 - abs(self.count - self.target) / self.target)
        info = {"count": self.count, "target": self.target}
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
