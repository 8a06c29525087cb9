"""GRPO advantages: each sample's reward against its group's (slime's definition), or against the batch's.

r' = r - mean_g(r); r'' = r' / (std_g(r') + eps), unbiased std; the std step is skipped when disabled
or when a group has a single sample. Pure tensor code, like tandem.losses, which every trainer shares.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

import torch
from torch import Tensor

if TYPE_CHECKING:  # only for typing
    from tandem.sample import Sample


def _normalize_group(r: Tensor, use_std_norm: bool, eps: float) -> Tensor:
    centred = r - r.mean()
    # A single-sample group has no spread to estimate (unbiased std is NaN), so only centre it.
    if use_std_norm and r.numel() > 1:
        centred = centred / (centred.std(unbiased=True) + eps)
    return centred


def grpo_advantages(
    rewards: Tensor,
    use_std_norm: bool = True,
    eps: float = 1e-6,
    group_ids: Tensor | None = None,
) -> Tensor:
    """Group-normalized rewards.

    `rewards` is either [num_groups, G] (one row per prompt), or flat [N] together with
    `group_ids` [N] (groups may then differ in size, e.g. after dropped samples).
    Returns a float tensor of the same shape as `rewards`.
    """
    r = rewards.to(torch.float64)  # small groups of near-equal rewards: keep the std step exact
    if group_ids is None:
        if r.dim() != 2:
            raise ValueError(f"rewards must be [num_groups, G] without group_ids; got shape {tuple(r.shape)}")
        out = torch.stack([_normalize_group(row, use_std_norm, eps) for row in r]) if r.shape[0] else r.clone()
    else:
        if r.dim() != 1 or group_ids.shape != r.shape:
            raise ValueError("flat rewards and group_ids must both be 1-D and of equal length")
        out = torch.empty_like(r)
        for gid in torch.unique(group_ids):
            sel = group_ids == gid
            out[sel] = _normalize_group(r[sel], use_std_norm, eps)
    return out.to(torch.float32)


def assign_advantages(samples: "Iterable[Sample]", use_std_norm: bool = True, eps: float = 1e-6,
                      baseline: str = "group") -> None:
    """Fill `sample.advantage` in place, grouping samples by `sample.group_id`. Samples of one group that
    share `metadata["trajectory"]` are segments of one trajectory (an outside harness that rewrote its
    history, tandem.harness): it counts once in its group's statistics and every segment gets its advantage.
    baseline = "batch" (trainer.loss.advantage_baseline) centres (and scales) over all trajectories at once."""
    samples = list(samples)
    if not samples:
        return
    trajectory_of: dict[tuple, int] = {}
    index = [trajectory_of.setdefault((int(s.group_id), s.metadata.get("trajectory", ("sample", i))), i)
             for i, s in enumerate(samples)]
    firsts = sorted(set(index))
    rewards = torch.tensor([float(samples[i].reward) for i in firsts], dtype=torch.float64)
    groups = torch.tensor([int(samples[i].group_id) for i in firsts], dtype=torch.long)
    if baseline == "batch":  # one statistics group; trajectories are still told apart by their group above
        groups = torch.zeros_like(groups)
    elif baseline != "group":
        raise ValueError(f"advantage baseline must be 'group' or 'batch', not {baseline!r}")
    adv = dict(zip(firsts, grpo_advantages(rewards, use_std_norm=use_std_norm, eps=eps, group_ids=groups).tolist()))
    for s, i in zip(samples, index):
        s.advantage = float(adv[i])


# --------------------------------------------------------------------------- log-probs
