"""lookup: the answer is only in a tool's result.

The prompt never shows the secret digit; `lookup()` returns it (written `repeat` times). The
model must call the tool in one turn and answer with the digit in a later one. The reward
arrives when the episode ends, a turn after the call that earned part of it:

    no lookup, or no answer (every reply called the tool)     0
    looked up, then answered                                  0.2
      + per answer character (of the first `answer_chars`):   0.1 if a digit, 0.7 if the secret
        (averaged over the characters)

The success level (5-step mean 0.8) needs at least 5 answers in 7 right, out of reach for a
policy that calls and guesses: with k possible secrets it scores 0.3 + 0.7 / k (0.65 for the
bundled data's 2 digits). Reading the tool's result is what is learned, and the credit for it
is assigned across the turn boundary.

Why the call and a digit earn something: a random tiny model answers with one of 260 tokens,
so a reward only for the right digit is almost never seen (measured, one token per turn: with
a 0.5 call credit and no digit credit the reward stayed at the call level, 0.50, for 100 steps).
Why few secrets: with 10 possible digits the copy was not learned in 250 steps (0.63, the
guessing level), nor by a 4-layer, 128-wide model in 100; with 2 it is (bench/env_learning.py).
"""

from __future__ import annotations

from tandem.env import Environment


class Lookup(Environment):
    def __init__(self, answer_chars: int = 1, repeat: int = 8):
        if answer_chars < 1 or repeat < 1:
            raise ValueError(f"answer_chars and repeat must be at least 1, got {answer_chars} and {repeat}")
        self.answer_chars, self.repeat = answer_chars, repeat
        self.looked_up = 0

    def reset(self, row: dict) -> str:
        self.secret = str(row["secret"])
        return str(row["prompt"])

    def lookup(self) -> str:
        """Return the secret digit."""
        self.looked_up += 1
        return self.secret * self.repeat

    def reward(self) -> tuple[float, dict]:
        chars = self.answer[: self.answer_chars]
        hits = sum(ch == self.secret for ch in chars)
        digits = sum(ch.isdigit() for ch in chars)
        info = {"hits": hits, "looked_up": self.looked_up}
        if not self.looked_up:
            return 0.0, {**info, "reason": "answered without looking the secret up"}
        if not self.answer:
            return 0.0, {**info, "reason": "no answer: every reply called a tool"}
        return 0.2 + (0.1 * digits + 0.7 * hits) / self.answer_chars, info

    def info(self) -> dict:
        return {"lookup": {"calls": self.looked_up, "answer": self.answer[:20]}}

    @staticmethod
    def step_metrics(samples) -> dict[str, float]:
        if not samples:
            return {}
        used = [s.metadata.get("lookup", {}).get("calls", 0) > 0 for s in samples]
        return {"lookup_tool_use_rate": sum(used) / len(samples)}
