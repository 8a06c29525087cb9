"""What the sim engine's requests generate: plausible tokens and logprobs, no model.

Tokens are ids drawn from the tokenizer's printable tokens, logprobs from an exponential
(greedy requests are deterministic in the prompt and have logprobs near 0). When the client
fixes the length (`ignore_eos`) a request runs exactly `max_new_tokens`; otherwise it stops
with EOS after a geometric length (profile `outputs.natural_mean_tokens`). A whole output is
drawn at submit time, so the sim scheduler knows its length before it is "decoded".
"""

from __future__ import annotations

import math
import random
import string
from dataclasses import dataclass, field
from typing import Any

from tandem.engine.request import GenerateRequest
from tandem.lab.sim.profiles import OutputParams

_PRINTABLE = set(string.ascii_letters + string.digits + string.punctuation + " ")


@dataclass
class OutputPlan:
    """The tokens a request will produce, drawn at submit time (so stop rules can be pre-checked)."""

    ids: list[int]
    logprobs: list[float]
    rng: random.Random
    top: list[list[tuple[float, int]]] = field(default_factory=list)


def printable_token_ids(tokenizer: Any, vocab_size: int) -> list[int]:
    """Token ids that decode to printable ASCII, so responses look like text."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    pool = []
    for i in range(min(vocab_size, 4096)):
        if i in special:
            continue
        s = tokenizer.decode([i])
        if s and all(c in _PRINTABLE for c in s):
            pool.append(i)
    return pool or [i for i in range(vocab_size) if i not in special]


class OutputPlanner:
    """Draws each request's output; one per engine, seeded by the run seed and engine name."""

    def __init__(self, tokenizer: Any, vocab_size: int, outputs: OutputParams, rng: random.Random):
        self.tokenizer = tokenizer
        self.outputs = outputs
        self.rng = rng
        self.token_pool = printable_token_ids(tokenizer, vocab_size)

    def plan(self, req: GenerateRequest) -> tuple[int, OutputPlan]:
        """Draw the request's output now: (tokens it will generate, the plan).

        The continuation is a function of the prompt and seed only (greedy: of the prompt), not
        of stop settings, so a request with a stop token / stop string returns a prefix of the
        same request without one, as a real model does. The sequence holds no special tokens;
        unless ignore_eos, EOS ends it at a geometric "natural" length. Stop ids and stop
        strings are then applied in SGLang's order (the same rules `append_token` enforces).
        """
        sp = req.sampling
        if sp.seed is not None:
            seed: Any = f"seed:{sp.seed}"
        elif sp.greedy:
            seed = hash(tuple(req.input_ids))
        else:
            seed = self.rng.getrandbits(64)
        ids_rng, lp_rng, len_rng, top_rng = (random.Random(f"{seed}:{k}") for k in "ilnt")
        max_new = sp.max_new_tokens
        end = max_new
        eos = min(req.eos_token_ids) if req.eos_token_ids else None
        if not sp.ignore_eos and eos is not None:
            p = 1.0 / self.outputs.natural_mean_tokens
            natural = 1 if p >= 1 else 1 + int(math.log(1.0 - len_rng.random()) / math.log(1.0 - p))
            end = min(end, natural)
        ids = ids_rng.choices(self.token_pool, k=end)
        if end < max_new and eos is not None:
            ids[-1] = eos
        ids = self._cut_at_stops(req, ids)
        scale = abs(self.outputs.logprob_mean) * (0.1 if sp.greedy else 1.0)
        logprobs = [-lp_rng.expovariate(1.0 / scale) if scale > 0 else 0.0 for _ in ids]
        return len(ids), OutputPlan(ids, logprobs, top_rng)

    def _cut_at_stops(self, req: GenerateRequest, ids: list[int]) -> list[int]:
        """`ids` up to and including the first stop token id, else the first stop-string match."""
        stop_ids = req.stop_ids
        if stop_ids:
            for i, t in enumerate(ids):
                if t in stop_ids:
                    ids = ids[: i + 1]
                    break
        if req.stop_matcher is not None:
            text = self.tokenizer.decode(ids, skip_special_tokens=False)
            if any(s in text for s in req.stop_matcher.stops):
                for i in range(len(ids)):
                    if req.stop_matcher.match(ids[: i + 1]) is not None:
                        ids = ids[: i + 1]
                        break
        return ids

    def top_logprobs(self, plan: OutputPlan, i: int, k: int) -> list[tuple[float, int]]:
        """Top-k (logprob, id) for position i: the sampled token plus alternatives sharing the
        remaining probability mass (halving), sorted best first; probabilities sum to <= 1."""
        lp, tok = plan.logprobs[i], plan.ids[i]
        rest = max(1e-12, 1.0 - math.exp(lp))
        pool = self.token_pool
        others = [t for t in plan.rng.sample(pool, min(k + 1, len(pool))) if t != tok][: k - 1]
        top = [(lp, tok)] + [(math.log(rest * 0.5 ** (j + 1)), t) for j, t in enumerate(others)]
        top.sort(key=lambda x: -x[0])
        return top[:k]


def fill_prompt_logprobs(req: GenerateRequest, rng: random.Random) -> None:
    """Plausible prompt logprobs (first prompt token: None) when the request asks for them."""
    if not req.return_logprob or req.logprob_start_len < 0:
        return
    start = min(req.logprob_start_len, len(req.input_ids))
    lps: list[float | None] = []
    for pos in range(start, len(req.input_ids)):
        lps.append(None if pos == 0 else -rng.expovariate(0.5))
    req.input_token_logprobs = lps
    if req.top_logprobs_num > 0:
        req.input_top_logprobs = [None if lp is None else [(lp, req.input_ids[start + j])]
                                  for j, lp in enumerate(lps)]


__all__ = ["OutputPlan", "OutputPlanner", "fill_prompt_logprobs", "printable_token_ids"]
