"""lookup: the answer is only in a tool's result.

The prompt never shows the secret digit; `lookup()` returns it. The model must call the
tool in one turn and answer with what it returned in the next. An answer given without
a lookup scores 0 (a guess is not evidence), and so does an episode that never answers
(it ran out of turns calling the tool). An answer after a lookup scores
0.5 + 0.5 x the fraction of the answer's first `answer_chars` characters equal to the
secret (partial credit, as in the default echo task). Both halves arrive only when the
episode ends, a turn after the call; the second half needs the digit read from the tool's
result, so the success level (0.8) is out of reach for a policy that calls and guesses.

Why the call earns half: a random tiny model calls the tool in about 1.5% of first turns
and then copies nothing, so an episode that calls and one that guesses scored the same
(measured: 140 steps, tool use stayed at 1-10%, reward at the guessing level 0.1).
"""

from __future__ import annotations

from tandem.env import Environment


class Lookup(Environment):
    def __init__(self, answer_chars: int = 4, repeat: int = 8):
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
        hits = sum(ch == self.secret for ch in self.answer[: self.answer_chars])
        info = {"hits": hits, "looked_up": self.looked_up}
        if not self.looked_up:
            return 0.0, {**info, "reason": "answered without looking the secret up"}
        if not self.answer:
            return 0.0, {**info, "reason": "no answer: every reply called a tool"}
        return 0.5 + 0.5 * hits / self.answer_chars, info

    def info(self) -> dict:
        return {"lookup": {"calls": self.looked_up, "answer": self.answer[:20]}}

    @staticmethod
    def step_metrics(samples) -> dict[str, float]:
        if not samples:
            return {}
        used = [s.metadata.get("lookup", {}).get("calls", 0) > 0 for s in samples]
        return {"lookup_tool_use_rate": sum(used) / len(samples)}
