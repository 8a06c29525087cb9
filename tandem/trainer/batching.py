"""The batch layout every model-training backend shares (torch and Megatron).

A sample is prompt_ids + response_ids, right-padded in its micro-batch. Logits at
position t score token t+1, so every per-token tensor lives in the shifted [b, L-1]
layout and response token j of a sample with prompt length P sits at column P-1+j.
`loss_mask` (interleaved 0/1 for multi-turn) is copied there verbatim, so observation
tokens, the prompt and padding never reach the loss.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tandem.sample import Sample


@dataclass
class MicroBatch:
    """Right-padded tensors of a few samples, per-token tensors in the shifted [b, L-1] layout.

    Satisfies `tandem.losses.LossInputs`, so it goes to `PolicyLoss` as it is.
    """

    input_ids: Tensor  # [b, L]
    attention_mask: Tensor  # [b, L]
    mask: Tensor  # [b, L-1] float, 1 where a response token is trained on
    advantages: Tensor  # [b, L-1]
    rollout_logp: Tensor  # [b, L-1]
    old_logp: Tensor | None = None  # [b, L-1]; None means "on-policy: use the live logp, detached"
    ref_logp: Tensor | None = None  # [b, L-1]; only with a KL penalty

    @property
    def targets(self) -> Tensor:
        return self.input_ids[:, 1:]


def validate_samples(samples: list[Sample]) -> None:
    for i, s in enumerate(samples):
        if not s.prompt_ids:
            raise ValueError(f"sample {i}: empty prompt_ids (the first response token needs a context)")
        n = len(s.response_ids)
        if len(s.loss_mask) != n or len(s.rollout_logprobs) != n:
            raise ValueError(
                f"sample {i}: response_ids ({n}), loss_mask ({len(s.loss_mask)}) and "
                f"rollout_logprobs ({len(s.rollout_logprobs)}) must be aligned"
            )


def collate(samples: list[Sample], device: torch.device, pad_id: int = 0) -> MicroBatch:
    """Right-pad samples into one micro-batch (see the module docstring for the layout)."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    b, length = len(samples), max(max(lengths), 2)
    input_ids = torch.full((b, length), pad_id, dtype=torch.long)
    attention = torch.zeros((b, length), dtype=torch.long)
    mask = torch.zeros((b, length - 1))
    adv = torch.zeros((b, length - 1))
    rollout = torch.zeros((b, length - 1))
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention[i, : p + r] = 1
        if r:
            mask[i, p - 1 : p - 1 + r] = torch.tensor(s.loss_mask, dtype=torch.float32)
            rollout[i, p - 1 : p - 1 + r] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
        adv[i, :] = float(s.advantage)
    return MicroBatch(
        input_ids.to(device), attention.to(device), mask.to(device), adv.to(device), rollout.to(device)
    )


def split_even(items: list, parts: int) -> list[list]:
    """`parts` contiguous chunks whose sizes differ by at most one (empty chunks dropped)."""
    q, r = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + q + (1 if k < r else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]
