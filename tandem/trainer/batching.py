"""The batch layout every model-training backend shares (torch and Megatron).

A sample is prompt_ids + response_ids. Logits at position t score token t+1, so every
per-token tensor lives in the shifted layout (one column fewer than the tokens) and response
token j of a sample with prompt length P starting at column o sits at column o+P-1+j.
`loss_mask` (interleaved 0/1 for multi-turn) is copied there verbatim, so observation tokens,
the prompt and padding never reach the loss.

Two ways to form micro-batches (`micro_batches`):
- padded (trainer.micro_batch_size samples, right-padded to the longest): [b, L];
- packed (trainer.max_tokens_per_micro_batch > 0): samples laid end to end in one row [1, T]
  without padding, up to the token budget; positions restart at 0 for each sample, attention
  is block-diagonal (each sample sees only itself), and `segments` tells the loss which
  sample each position belongs to, so per-sample means are those of the padded layout. A
  sample longer than the budget gets a micro-batch of its own.
"""

from __future__ import annotations

import itertools
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
    # Packed micro-batches only (b = 1): see the module docstring.
    position_ids: Tensor | None = None  # [1, T], restarting at 0 for every sample
    segments: Tensor | None = None  # [1, T-1], the sample index of each shifted position, -1 for none
    cu_seqlens: Tensor | None = None  # [n + 1] int32, where each sample starts in the row, and T
    routed: Tensor | None = None  # [b, L, layers, top_k] int32: the engine's experts per token (trainer.moe), -1: none

    @property
    def targets(self) -> Tensor:
        return self.input_ids[:, 1:]

    @property
    def num_samples(self) -> int:
        return self.input_ids.shape[0] if self.cu_seqlens is None else self.cu_seqlens.numel() - 1

    @property
    def packed(self) -> bool:
        return self.cu_seqlens is not None


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


def pack_by_tokens(samples: list[Sample], max_tokens: int) -> list[list[Sample]]:
    """Samples grouped into micro-batches of at most `max_tokens` tokens (first fit, longest first).

    Within a micro-batch the samples keep their batch order. A sample longer than the budget
    forms a micro-batch of its own (a sequence cannot be split without context parallelism).
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    length = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(samples)), key=lambda k: (-length[k], k)):
        fit = next((b for b, free in enumerate(room) if free >= length[i]), None)
        if fit is None:
            bins.append([i])
            room.append(max_tokens - length[i])
        else:
            bins[fit].append(i)
            room[fit] -= length[i]
    return [[samples[i] for i in sorted(b)] for b in bins]


def collate_packed(samples: list[Sample], device: torch.device, pad_id: int = 0) -> MicroBatch:
    """Samples end to end in one row (see the module docstring for the layout)."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    total = max(sum(lengths), 2)
    input_ids = torch.full((1, total), pad_id, dtype=torch.long)
    positions = torch.zeros((1, total), dtype=torch.long)
    segments = torch.full((1, total - 1), -1, dtype=torch.long)
    mask, adv, rollout = (torch.zeros((1, total - 1)) for _ in range(3))
    offset = 0
    for i, (s, n) in enumerate(zip(samples, lengths)):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[0, offset:offset + n] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        positions[0, offset:offset + n] = torch.arange(n)
        # The sample's last token would score the next sample's first: that position is no one's.
        segments[0, offset:offset + n - 1] = i
        adv[0, offset:offset + n - 1] = float(s.advantage)
        if r:
            at = offset + p - 1
            mask[0, at:at + r] = torch.tensor(s.loss_mask, dtype=torch.float32)
            rollout[0, at:at + r] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
        offset += n
    cu = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32)
    if total > offset:  # a lone 1-token sample: the row was padded to 2 columns
        cu[-1] = total
    return MicroBatch(input_ids.to(device), torch.ones_like(input_ids).to(device), mask.to(device), adv.to(device),
                      rollout.to(device), position_ids=positions.to(device), segments=segments.to(device),
                      cu_seqlens=cu.to(device))


def micro_batch_groups(samples: list[Sample], micro_batch_size: int, max_tokens: int) -> list[list[Sample]]:
    """The samples of each micro-batch `micro_batches` forms, in its order."""
    return pack_by_tokens(samples, max_tokens) if max_tokens > 0 else chunks(samples, micro_batch_size)


def token_offsets(group: list[Sample], packed: bool) -> list[tuple[int, int]]:
    """(row, column) of each sample's first token in its micro-batch."""
    if not packed:
        return [(i, 0) for i in range(len(group))]
    starts = itertools.accumulate((len(s.tokens) for s in group[:-1]), initial=0)
    return [(0, start) for start in starts]


def micro_batches(samples: list[Sample], micro_batch_size: int, max_tokens: int, device: torch.device,
                  pad_id: int = 0) -> list[MicroBatch]:
    """A mini-batch as micro-batches: packed by token budget when `max_tokens` > 0, else padded
    groups of `micro_batch_size` samples (trainer.max_tokens_per_micro_batch, trainer.micro_batch_size)."""
    form = collate_packed if max_tokens > 0 else collate
    return [form(group, device, pad_id) for group in micro_batch_groups(samples, micro_batch_size, max_tokens)]
