"""The embedded engine's sampling kernels: per-row temperature / top-k / top-p / min-p, vectorised.

Logprobs: the logprob reported for a sampled token is log_softmax(logits / temperature)[token],
i.e. the temperature-scaled distribution *before* top-p / top-k / min-p filtering (what SGLang
reports and what the trainer recomputes with the same temperature). Temperature 0 (greedy)
reports log_softmax(logits) of the argmax token. Prompt logprobs (logprob_start_len >= 0) use
the same temperature.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tandem.engine.batch import RunningBatch
from tandem.engine.request import GenerateRequest


@dataclass
class RowParams:
    """Per-row sampling flags computed once per batch membership change (not per step)."""

    all_greedy: bool
    any_greedy: bool
    uniform_temp: float | None   # a single temperature shared by all non-greedy rows, if any
    need_filter: bool            # some row uses top_p < 1, top_k, or min_p > 0
    top_n: int                   # max top_logprobs_num across rows (0: none)

    @classmethod
    def of(cls, reqs: list[GenerateRequest], vocab: int) -> "RowParams":
        s = [r.sampling for r in reqs]
        greedy = [p.greedy for p in s]
        temps = {p.temperature for p, g in zip(s, greedy) if not g}
        return cls(
            all_greedy=all(greedy), any_greedy=any(greedy),
            uniform_temp=temps.pop() if len(temps) == 1 else None,
            need_filter=any(not g and (p.top_p < 1.0 or 0 < p.top_k < vocab or p.min_p > 0.0)
                            for p, g in zip(s, greedy)),
            top_n=max((r.top_logprobs_num for r in reqs if r.return_logprob), default=0),
        )


def sample(logits: torch.Tensor, b: RunningBatch, p: RowParams, generator: torch.Generator
           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Per-row sampling, vectorised. Returns (tokens, logprobs, top-k (values, ids) or None)."""
    logits = logits.float()
    if p.all_greedy:
        logp = torch.log_softmax(logits, dim=-1)
        tok = logits.argmax(dim=-1)
    else:
        if p.uniform_temp is not None and not p.any_greedy:
            scaled = logits if p.uniform_temp == 1.0 else logits / p.uniform_temp
        else:
            scaled = logits / b.temp[:, None]
        logp = torch.log_softmax(scaled, dim=-1)
        probs = logp.exp()
        if p.need_filter:
            probs = filter_probs(probs, b)
        # Exponential race: argmax(p / E) with E = -log U ~ Exp(1) samples from p, with no
        # host sync (and U -> -log U is ~3x cheaper than Tensor.exponential_ on CPU).
        noise = torch.rand(probs.shape, generator=generator, device=probs.device).log_().neg_()
        seeded_noise(noise, b)
        tok = (probs / noise).argmax(dim=-1)
        if p.any_greedy:
            tok = torch.where(b.greedy, logits.argmax(dim=-1), tok)
    lp = logp.gather(-1, tok[:, None]).squeeze(-1)
    top = None
    if p.top_n > 0:
        top = logp.topk(p.top_n, dim=-1)
    return tok, lp, top


def seeded_noise(noise: torch.Tensor, b: RunningBatch) -> None:
    """Overwrite the noise of rows whose request names a seed with Exp(1) noise drawn from (seed,
    output position) alone: the row's token then depends on its own logits and seed, not on the
    batch it shares or the engine's stream (run.reproducible sends a seed per request)."""
    for i, req in enumerate(b.reqs):
        if req.sampling.seed is None:
            continue
        key = (req.sampling.seed * 1_000_003 + len(req.output_ids)) % (1 << 63)
        row = torch.Generator(device=noise.device).manual_seed(key)
        noise[i] = torch.rand(noise.shape[-1], generator=row, device=noise.device).log_().neg_()


def filter_probs(probs: torch.Tensor, b: RunningBatch) -> torch.Tensor:
    """Zero out tokens excluded by each row's top_k, top_p and min_p (greedy rows are overridden later)."""
    sp, si = probs.sort(dim=-1, descending=True)
    ranks = torch.arange(sp.shape[-1], device=sp.device)[None, :]
    drop = ranks >= b.top_k[:, None]
    cum = sp.cumsum(dim=-1)
    drop |= (cum - sp) > b.top_p[:, None]          # keep the smallest prefix reaching top_p
    drop |= sp < (b.min_p * sp[:, 0])[:, None]
    drop[:, 0] = False                               # always keep the most likely token
    sp = sp.masked_fill(drop, 0.0)
    return torch.zeros_like(probs).scatter_(-1, si, sp)


def wants_prompt_logprobs(r: GenerateRequest) -> bool:
    """Whether prefilling `r` must also score its prompt (and has not done so before a retraction)."""
    return r.return_logprob and r.logprob_start_len >= 0 and r.input_token_logprobs is None


def record_prompt_logprobs(reqs: list[GenerateRequest], want: list[bool], seqs: list[list[int]],
                           logits: torch.Tensor, rows: RunningBatch, L: int) -> None:
    """Fill `input_token_logprobs` (and top logprobs) of the prefilled rows that asked for them.
    `logits` is the prefill's [B, L, vocab] output over the left-padded `seqs`."""
    scaled = logits.float() / rows.temp[:, None, None]
    logp = torch.log_softmax(scaled, dim=-1)
    for i, r in enumerate(reqs):
        if not want[i]:
            continue
        n = len(seqs[i])
        off = L - n
        # logp[off + j - 1] predicts token j of the sequence (j >= 1); token 0 has no logprob.
        tgt = torch.tensor(seqs[i][1:], dtype=torch.long, device=logp.device)
        vals = logp[i, off:off + n - 1].gather(-1, tgt[:, None]).squeeze(-1).tolist() if n > 1 else []
        start = max(r.logprob_start_len, 0)
        full: list[float | None] = [None] + vals
        r.input_token_logprobs = full[start:len(r.input_ids)]
        if r.top_logprobs_num > 0:
            tv, ti = logp[i, off:off + n - 1].topk(r.top_logprobs_num, dim=-1)
            tops: list[list[tuple[float, int]] | None] = [None] + [
                list(zip(v, t)) for v, t in zip(tv.tolist(), ti.tolist())]
            r.input_top_logprobs = tops[start:len(r.input_ids)]


__all__ = ["RowParams", "filter_probs", "seeded_noise", "record_prompt_logprobs", "sample", "wants_prompt_logprobs"]
