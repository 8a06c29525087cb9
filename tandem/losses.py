"""The RL math every trainer backend shares: policy loss, KL, TIS, aggregation (advantages:
tandem.advantages).

Pure tensor functions (no model, no HF, no config objects) so the torch backend, a
Megatron backend and the tests all compute exactly the same numbers. Definitions follow
slime's:

- PPO clip: L = max(-rho*A, -clip(rho, 1-eps, 1+eps_high)*A); dual clip for A < 0 caps L at -c*A.
- KL with x = logp - logp_ref: k1 = x, k2 = x^2/2, k3 = exp(-x) - 1 + x clamped to [-10, 10].
- TIS: w = min(exp(logp_old - logp_rollout), high) multiplies the token loss.
- GSPO (Zheng et al. 2025): the PPO clip on the sequence ratio s_i = exp(mean_t(logp - logp_old))
  over sample i's trained tokens, so a whole sequence is kept or clipped (`gspo_loss`).
- CISPO (MiniMax-M1, 2025): -sg(clip(rho, 1-eps, 1+eps_high)) * A * logp: every token keeps
  its gradient, the importance weight is clipped and not differentiated (`cispo_loss`).

All per-token tensors share one shape (usually [batch, seq]); `mask` is 1.0 where a token
is trained on and 0.0 elsewhere (prompt, padding, tool/observation tokens). A packed row
holds several samples; `segments` tells `aggregate` which positions are whose.

`chunked_scores` computes log-probs and entropy from hidden states a chunk of positions at a
time (trainer.logprob_chunk_tokens), each chunk's logits recomputed in the backward, so the
whole micro-batch's [tokens, vocab] logits never exist.

`PolicyLoss` puts those pieces together into the one micro-batch objective (policy
gradient + KL - entropy) and its metric sums, which every trainer backend calls; it reads
its settings from a loss config but holds no model or device state.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Literal, Protocol

import torch
from torch import Tensor
from torch.utils.checkpoint import checkpoint

Aggregation = Literal["seq_mean_token_mean", "token_mean"]
Objective = Literal["ppo", "gspo", "cispo"]
KLEstimator = Literal["k1", "k2", "k3"]


def token_logprobs(logits: Tensor, targets: Tensor, temperature: float = 1.0) -> Tensor:
    """log_softmax(logits / T) at `targets`: [..., V] x [...] -> [...].

    Engines report logprobs of the *tempered* distribution they sampled from, so the
    trainer must use the same temperature or rho and the mismatch metric are biased.
    Computed as x - logsumexp(x) to avoid materializing a second [..., V] tensor.
    """
    x = logits.float()
    if temperature != 1.0:
        x = x / temperature
    picked = torch.gather(x, -1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(x, dim=-1)


def entropy_from_logits(logits: Tensor) -> Tensor:
    """Entropy (nats) of softmax(logits) over the last dim: [..., V] -> [...]."""
    x = logits.float()
    logp = torch.log_softmax(x, dim=-1)
    return -(logp.exp() * logp).sum(-1)


ScoreFn = Callable[[Tensor, Tensor], Tensor]
"""(logits [c, V], targets [c]) -> log p(target) [c]."""
EntropyFn = Callable[[Tensor], Tensor]
"""logits [c, V] -> entropy [c]."""


def chunked_scores(hidden: Tensor, head: Callable[[Tensor], Tensor], targets: Tensor, chunk_tokens: int,
                   logp_fn: ScoreFn, entropy_fn: EntropyFn | None = None,
                   entropy_grad: bool = False) -> tuple[Tensor, Tensor | None]:
    """Log-probs (and entropies) of `targets` from hidden states, `chunk_tokens` positions at a time.

    `hidden` [..., h] and `targets` [...] share their leading shape; `head` maps rows of hidden
    states to logits (the LM head, whole or vocab-parallel). Only one chunk's logits exist at a
    time: with grad, each chunk runs under activation checkpointing, so its logits are recomputed
    in the backward instead of kept for the whole micro-batch. Rows are independent, so the
    numbers are those of scoring everything at once. The entropy carries grad only with
    `entropy_grad` (the entropy term is in the loss); otherwise it is a metric and keeps nothing.
    """
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    lead = targets.shape
    rows, ids = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)

    def one(h: Tensor, t: Tensor) -> tuple[Tensor, ...]:
        logits = head(h)
        logp = logp_fn(logits, t)
        if entropy_fn is None:
            return (logp,)
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            return logp, entropy_fn(logits)

    recompute = torch.is_grad_enabled()
    parts = []
    for start in range(0, rows.shape[0], chunk_tokens):
        h, t = rows[start:start + chunk_tokens], ids[start:start + chunk_tokens]
        # No RNG inside (the head has no dropout), so its state need not be saved for the recompute.
        parts.append(checkpoint(one, h, t, use_reentrant=False, preserve_rng_state=False) if recompute else one(h, t))
    if not parts:  # no positions at all
        empty = rows.new_zeros(lead)
        return empty, (empty if entropy_fn is not None else None)
    logp = torch.cat([p[0] for p in parts]).reshape(lead)
    entropy = torch.cat([p[1] for p in parts]).reshape(lead) if entropy_fn is not None else None
    return logp, entropy


# --------------------------------------------------------------------------- losses
def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_clip: float = 0.2,
    eps_clip_high: float | None = None,
    dual_clip_c: float | None = None,
    tis_weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """PPO-clip token loss. Returns (loss per token, clipped indicator per token), both zero where mask is 0.

    `advantages` has the shape of `logp` (broadcast a per-sample advantage before calling).
    The clip indicator is 1 where the clipped term was the larger one, i.e. where the
    gradient was cut by the trust region (dual-clipped tokens count as clipped as well).
    """
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(logp - old_logp)
    unclipped = -ratio * advantages
    clipped = -ratio.clamp(1.0 - eps_clip, 1.0 + eps_high) * advantages
    loss = torch.maximum(unclipped, clipped)
    clip_flag = (clipped > unclipped).float()
    if dual_clip_c is not None:
        if dual_clip_c <= 1.0:
            raise ValueError(f"dual_clip_c must be > 1, got {dual_clip_c}")
        # For A < 0 a huge ratio makes -rho*A unbounded; cap it at -c*A (Ye et al. 2020).
        cap = -dual_clip_c * advantages
        capped = torch.minimum(loss, cap)
        neg = advantages < 0
        clip_flag = torch.where(neg & (cap < loss), torch.ones_like(clip_flag), clip_flag)
        loss = torch.where(neg, capped, loss)
    if tis_weights is not None:
        loss = loss * tis_weights.detach()
    mask = mask.to(loss.dtype)
    return loss * mask, clip_flag * mask


def sequence_mean(values: Tensor, mask: Tensor, segments: Tensor | None = None) -> Tensor:
    """Each position's value replaced by the masked mean of its sample's values (same shape).

    A sample is a row ([batch, seq]) or, with `segments`, the positions of a packed row that
    carry its index; positions of no sample (-1) get 0.
    """
    mask = mask.to(values.dtype)
    if segments is None:
        means = (values * mask).sum(-1, keepdim=True) / mask.sum(-1, keepdim=True).clamp_min(1.0)
        return means.expand_as(values)
    means = segment_sum(values * mask, segments) / segment_sum(mask, segments).clamp_min(1.0)
    if means.numel() == 0:
        return torch.zeros_like(values)
    return torch.where(segments >= 0, means[segments.clamp_min(0)], torch.zeros_like(values))


def sequences_with(flags: Tensor, segments: Tensor | None = None) -> Tensor:
    """How many samples have at least one nonzero per-token flag (rows, or packed `segments`)."""
    per_sample = flags.reshape(-1, flags.shape[-1]).sum(-1) if segments is None else segment_sum(flags, segments)
    return (per_sample > 0).sum().to(flags.dtype)


def gspo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_clip: float = 3e-4,
              eps_clip_high: float | None = None, dual_clip_c: float | None = None,
              tis_weights: Tensor | None = None, segments: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """GSPO: `policy_loss` with every token's ratio replaced by its sample's sequence ratio
    s = exp(mean_t(logp - old_logp)), which carries the gradient s * mean_t(grad logp).

    Every trained token of a sample then has the same loss and clip flag, so the sample-mean
    aggregation gives the paper's per-sequence objective. Returns (loss, clip flag) per token.
    """
    seq_log_ratio = sequence_mean(logp - old_logp, mask, segments)
    return policy_loss(seq_log_ratio, torch.zeros_like(seq_log_ratio), advantages, mask, eps_clip, eps_clip_high,
                       dual_clip_c, tis_weights)


def cispo_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, eps_clip: float = 0.2,
               eps_clip_high: float | None = None,
               tis_weights: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """CISPO: -sg(clip(rho, 1 - eps_clip, 1 + eps_clip_high)) * A * logp per token. Unlike the PPO
    clip no token loses its gradient; a clipped weight only bounds it. The clip flag is 1 where
    rho fell outside the range. Returns (loss, clip flag) per token, zero where mask is 0."""
    eps_high = eps_clip if eps_clip_high is None else eps_clip_high
    ratio = torch.exp(logp - old_logp).detach()
    weight = ratio.clamp(1.0 - eps_clip, 1.0 + eps_high)
    loss = -weight * advantages * logp
    if tis_weights is not None:
        loss = loss * tis_weights.detach()
    mask = mask.to(loss.dtype)
    return loss * mask, (weight != ratio).to(loss.dtype) * mask


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: KLEstimator = "k3") -> Tensor:
    """Per-token KL(pi || pi_ref) estimate from sampled-token logprobs."""
    x = logp - ref_logp
    if estimator == "k1":
        return x
    if estimator == "k2":
        return 0.5 * x.square()
    if estimator == "k3":
        # Schulman's low-variance estimator; the clamp keeps one wild token from dominating.
        return (torch.exp(-x) - 1.0 + x).clamp(-10.0, 10.0)
    raise ValueError(f"unknown KL estimator {estimator!r} (k1, k2, k3)")


def tis_weights(old_logp: Tensor, rollout_logp: Tensor, high: float) -> Tensor:
    """Importance weight pi_old / pi_rollout correcting engine-vs-trainer mismatch, truncated at
    `high` (trainer.loss.tis_clip_high)."""
    return torch.exp(old_logp - rollout_logp).detach().clamp(0.0, high)


# --------------------------------------------------------------------------- reductions
def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: Aggregation = "seq_mean_token_mean",
    num_samples: int | None = None,
    num_tokens: float | None = None,
    segments: Tensor | None = None,
) -> Tensor:
    """Reduce a [batch, seq] per-token quantity to a scalar.

    seq_mean_token_mean: mean over samples of each sample's masked token mean (a sample
    with no trained tokens contributes 0 but still counts). token_mean: one mean over all
    masked tokens. `num_samples` / `num_tokens` override the denominators so a micro-batch
    can contribute its exact share of a larger batch: summing the micro-batch results then
    equals the full-batch value, which is what gradient accumulation needs.

    `segments` (same shape, the sample index of each position, -1 for none) is for packed
    rows that hold several samples: a sample's mean is then taken over its own positions,
    so a packed micro-batch gives the numbers of the padded one.
    """
    mask = mask.to(per_token.dtype)
    masked = per_token * mask
    if mode == "seq_mean_token_mean":
        if segments is None:
            per_seq = masked.sum(-1) / mask.sum(-1).clamp_min(1.0)
        else:
            per_seq = segment_sum(masked, segments) / segment_sum(mask, segments).clamp_min(1.0)
        denom = per_seq.shape[0] if num_samples is None else num_samples
        return per_seq.sum() / max(denom, 1)
    if mode == "token_mean":
        denom = float(mask.sum()) if num_tokens is None else float(num_tokens)
        return masked.sum() / max(denom, 1.0)
    raise ValueError(f"unknown aggregation {mode!r} (seq_mean_token_mean, token_mean)")


def segment_sum(values: Tensor, segments: Tensor) -> Tensor:
    """Per-sample sums of a packed per-token tensor: [num_samples] where segments holds 0..n-1 (-1: no sample)."""
    flat, ids = values.reshape(-1), segments.reshape(-1)
    keep = ids >= 0
    n = int(ids.max().item()) + 1 if bool(keep.any()) else 0
    return torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, ids[keep], flat[keep])


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    """Mean of x over mask==1 entries (0 when the mask is empty)."""
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def logprob_mismatch(old_logp: Tensor, rollout_logp: Tensor, mask: Tensor) -> Tensor:
    """Mean |logp_old - logp_rollout| over trained tokens (slime's train_rollout_logprob_abs_diff)."""
    return masked_mean((old_logp - rollout_logp).abs(), mask)



# --------------------------------------------------------------------------- the micro-batch objective
class LossInputs(Protocol):
    """Per-token tensors of one micro-batch, all shaped like the log-probs scored for it."""

    mask: Tensor
    advantages: Tensor
    rollout_logp: Tensor
    old_logp: Tensor | None  # None: on-policy, the live log-probs (detached) are the old policy
    ref_logp: Tensor | None  # None: no KL term
    # Optional (read with getattr): segments, the sample index of each position of a packed row
    # (-1 for none), for the per-sample means of seq_mean_token_mean (see `aggregate`).


@dataclass(frozen=True)
class PolicyLoss:
    """Policy gradient (`objective`: PPO clip, GSPO or CISPO; TIS-weighted when `tis`) + kl_coef * KL
    - entropy_coef * entropy.

    Call it once per micro-batch with the denominators of the whole mini-batch (see
    `aggregate`), so the micro-batch losses sum to the mini-batch loss and their gradients
    accumulate to its gradient. It returns the loss to back-propagate and detached metric
    sums: `loss` and `pg_loss` as this micro-batch's share, the others (`METRICS[2:]`) as
    sums over its trained tokens, for the caller to divide by the token count, except `seq_clip_frac`:
    the number of its samples with a clipped token (GSPO: whose sequence ratio was clipped), for the
    caller to divide by the sample count.
    """

    objective: Objective = "ppo"
    eps_clip: float = 0.2
    eps_clip_high: float | None = None
    dual_clip_c: float | None = None
    kl_coef: float = 0.0
    kl_estimator: KLEstimator = "k3"
    entropy_coef: float = 0.0
    aggregation: Aggregation = "seq_mean_token_mean"
    tis: bool = False
    tis_clip_high: float = 2.0

    METRICS: ClassVar[tuple[str, ...]] = ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ppo_kl", "mismatch",
                                          "seq_clip_frac")

    @classmethod
    def from_config(cls, loss_cfg: Any) -> PolicyLoss:
        """From `trainer.loss` (any object with these field names, e.g. tandem.config's LossConfig)."""
        return cls(**{f.name: getattr(loss_cfg, f.name) for f in fields(cls)})

    def __call__(self, logp: Tensor, entropy: Callable[[], Tensor], batch: LossInputs,
                 num_samples: int, num_tokens: float) -> tuple[Tensor, dict[str, Tensor]]:
        """`logp`: log-probs of the targets, with grad. `entropy`: computes the per-token entropy;
        it is called with grad only when the entropy term is in the loss, because it needs the
        full softmax and would otherwise keep it alive for backward."""
        agg: dict[str, Any] = dict(mode=self.aggregation, num_samples=num_samples, num_tokens=num_tokens,
                   segments=getattr(batch, "segments", None))
        mask = batch.mask
        old = logp.detach() if batch.old_logp is None else batch.old_logp
        w = tis_weights(old, batch.rollout_logp, high=self.tis_clip_high) if self.tis else None
        pg, clipped = self.policy_gradient(logp, old, batch, w)
        pg_loss = aggregate(pg, mask, **agg)
        loss = pg_loss
        kl_sum = torch.zeros((), device=logp.device)
        if batch.ref_logp is not None:
            kl = kl_penalty(logp, batch.ref_logp, self.kl_estimator)
            loss = loss + self.kl_coef * aggregate(kl, mask, **agg)
            kl_sum = (kl.detach() * mask).sum()
        with torch.set_grad_enabled(self.entropy_coef != 0.0 and torch.is_grad_enabled()):
            ent = entropy()
        if self.entropy_coef != 0.0:
            loss = loss - self.entropy_coef * aggregate(ent, mask, **agg)
        sums = dict(loss=loss.detach(), pg_loss=pg_loss.detach(), kl=kl_sum, entropy=(ent.detach() * mask).sum(),
                    clip_frac=clipped.sum(), ppo_kl=((old - logp.detach()) * mask).sum(),
                    mismatch=((old - batch.rollout_logp).abs() * mask).sum(),
                    seq_clip_frac=sequences_with(clipped, agg["segments"]))
        return loss, sums

    def policy_gradient(self, logp: Tensor, old: Tensor, batch: LossInputs,
                        tis: Tensor | None) -> tuple[Tensor, Tensor]:
        """The `objective`'s per-token loss and clip flag."""
        if self.objective == "gspo":
            return gspo_loss(logp, old, batch.advantages, batch.mask, self.eps_clip, self.eps_clip_high,
                             self.dual_clip_c, tis, getattr(batch, "segments", None))
        if self.objective == "cispo":
            return cispo_loss(logp, old, batch.advantages, batch.mask, self.eps_clip, self.eps_clip_high, tis)
        return policy_loss(logp, old, batch.advantages, batch.mask, self.eps_clip, self.eps_clip_high,
                           self.dual_clip_c, tis)
