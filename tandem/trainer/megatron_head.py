"""The Megatron backend's loss head: from the last pipeline stage's output to per-token log-probs
and entropy, and the model call that produces that output (padded or packed micro-batches).

By trainer.logprob_chunk_tokens:
- 0: GPTModel's own output layer makes the micro-batch's logits ([b, L, V_pad/tp] per rank),
  scored whole;
- > 0: GPTModel returns its final hidden states instead (its output layer is skipped, see
  `hidden_states_of`) and `losses.chunked_scores` calls that output layer (megatron's
  ColumnParallelLinear: the input copied to the TP region, a matmul with this rank's vocab
  shard) and the scoring one chunk of positions at a time, each chunk's logits recomputed in
  the backward. In bf16 the logits are bf16 and scored in fp32, as Float16Module hands them to
  the whole-micro-batch path.

Scoring (both ways): with TP > 1 the logits are vocab-parallel. Log-probs and entropy are
computed without gathering the vocab (max / sum-exp / target logit all-reduced over TP, as
Megatron's own vocab-parallel cross entropy does); at TP = 1 `losses.token_logprobs` /
`entropy_from_logits` are called directly. The padded vocab rows never get probability mass.

Packed micro-batches (trainer.max_tokens_per_micro_batch) go to GPTModel with megatron-core's
PackedSeqParams (qkv_format 'thd'): RoPE restarts at every sample (its cu_seqlens) and the
attention (tandem's SDPA core attention) is causal within each sample only.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from tandem import losses
from tandem.trainer.batching import MicroBatch


def _vocab_shard(logits: Tensor, vocab_size: int) -> tuple[Any, int, Tensor]:
    """(TP group, first vocab row of this rank, which of its columns are real vocab, not padding)."""
    from megatron.core import parallel_state as ps

    part = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * part
    return ps.get_tensor_model_parallel_group(), start, torch.arange(start, start + part, device=logits.device) < vocab_size


def _lse_parts(x: Tensor, valid: Tensor, group: Any) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(x with padding at -inf, the global max, exp(x - max), the global sum of it) over the sharded vocab."""
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as tp_sum

    x = x.masked_fill(~valid, float("-inf"))
    gmax = x.detach().max(dim=-1).values
    dist.all_reduce(gmax, op=dist.ReduceOp.MAX, group=group)
    shifted = torch.exp(x - gmax.unsqueeze(-1))
    return x, gmax, shifted, tp_sum(shifted.sum(-1))


def vocab_parallel_entropy(logits: Tensor, vocab_size: int) -> Tensor:
    """Entropy of the untempered softmax of vocab-parallel logits, without gathering the vocab."""
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as tp_sum

    group, _, valid = _vocab_shard(logits, vocab_size)
    xr, rmax, rexp, rtotal = _lse_parts(logits.float(), valid, group)
    # H = logsumexp(x) - sum(p * x). Padded columns have p = 0 and x = -inf: zero x there
    # (not the product, whose backward would be 0 * inf = nan).
    px = tp_sum((rexp * xr.masked_fill(~valid, 0.0)).sum(-1))
    return (rmax + torch.log(rtotal)) - px / rtotal


def vocab_parallel_logprobs(logits: Tensor, targets: Tensor, temperature: float, vocab_size: int,
                            with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    """Per-token log p(target) at `temperature`, and (`with_entropy`) the entropy of the untempered
    softmax, from vocab-parallel logits [..., V_padded/tp] - without gathering the vocab.

    Same definitions as `losses.token_logprobs` / `losses.entropy_from_logits` (which the
    TP = 1 path calls directly); the tests check the two agree. Padded vocab columns are
    -inf. Differentiable: the all-reduces are Megatron's reduce_from_tensor_model_parallel_region
    (all-reduce forward, identity backward), valid because everything after them is
    computed identically on every TP rank.
    """
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as tp_sum

    group, start, valid = _vocab_shard(logits, vocab_size)
    part = logits.shape[-1]
    x = logits.float()
    xt, gmax, _, total = _lse_parts(x / temperature if temperature != 1.0 else x, valid, group)
    local_t = targets - start
    here = (local_t >= 0) & (local_t < part)
    picked = torch.gather(xt, -1, local_t.clamp(0, part - 1).unsqueeze(-1)).squeeze(-1)
    picked = tp_sum(torch.where(here, picked, torch.zeros_like(picked)))
    logp = picked - (gmax + torch.log(total))
    return logp, (vocab_parallel_entropy(logits, vocab_size) if with_entropy else None)


def core_model(model: Any) -> Any:
    """The GPTModel inside the DDP / Float16Module wrappers."""
    while not hasattr(model, "output_layer") and hasattr(model, "module"):
        model = model.module
    return model


@contextlib.contextmanager
def hidden_states_of(model: Any) -> Iterator[None]:
    """While active, GPTModel's forward returns the decoder's final hidden states [s, b, h] (after
    the final norm) instead of logits: its post-processing stops there when post_process is off."""
    core = core_model(model)
    core.post_process = False
    try:
        yield
    finally:
        core.post_process = True


def output_weight(model: Any) -> Tensor:
    """The last stage's output-layer weight (the embedding's, when tied), this rank's vocab shard."""
    core = core_model(model)
    return core.shared_embedding_or_output_weight() if core.share_embeddings_and_output_weights \
        else core.output_layer.weight


def packed_seq_params(mb: MicroBatch):
    """megatron-core's PackedSeqParams for a packed row: every sample its own causal sequence."""
    from megatron.core.packed_seq_params import PackedSeqParams

    if mb.cu_seqlens is None:
        raise ValueError("packed_seq_params: the micro-batch is not packed (no cu_seqlens)")
    cu = mb.cu_seqlens.to(device=mb.input_ids.device, dtype=torch.int32)
    longest = int((cu[1:] - cu[:-1]).max())
    return PackedSeqParams(qkv_format="thd", cu_seqlens_q=cu, cu_seqlens_kv=cu, max_seqlen_q=longest,
                           max_seqlen_kv=longest)


def run_model(model: Any, mb: MicroBatch, hidden: bool, bf16: bool) -> Tensor:
    """The last stage's output for a micro-batch, batch-first: logits [b, L, V_pad/tp], or with
    `hidden` the final hidden states [b, L, h] (kept in bf16 when training in bf16: the chunked
    head casts each chunk itself). Other stages: the activations to send on."""
    ids = mb.input_ids
    pos = mb.position_ids if mb.packed else torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)
    kwargs: dict[str, Any] = {"packed_seq_params": packed_seq_params(mb)} if mb.packed else {}
    if hidden and bf16:
        kwargs["fp32_output"] = False  # Float16Module: the hidden states stay bf16 (half the bytes kept)
    if not hidden:
        return model(ids, pos, None, **kwargs)
    with hidden_states_of(model):
        out = model(ids, pos, None, **kwargs)
    return out.transpose(0, 1) if core_model(model).post_process else out


class LossHead:
    """Per-token scores of the shifted targets from a micro-batch's last-stage output (module docstring)."""

    def __init__(self, tp: int, vocab_size: int, temperature: float, chunk_tokens: int):
        self.tp, self.vocab_size, self.temperature, self.chunk_tokens = tp, vocab_size, temperature, chunk_tokens

    def logp(self, logits: Tensor, targets: Tensor) -> Tensor:
        if self.tp == 1:
            return losses.token_logprobs(logits[..., : self.vocab_size], targets, self.temperature)
        return vocab_parallel_logprobs(logits, targets, self.temperature, self.vocab_size, False)[0]

    def entropy(self, logits: Tensor) -> Tensor:
        if self.tp == 1:
            return losses.entropy_from_logits(logits[..., : self.vocab_size])
        return vocab_parallel_entropy(logits, self.vocab_size)

    def scores(self, model: Any, output: Tensor, targets: Tensor, with_entropy: bool,
               entropy_grad: bool) -> tuple[Tensor, Tensor | None]:
        """(logp [b, L-1], entropy [b, L-1] or None) from `run_model`'s output of `model`."""
        output = output[:, :-1]
        if self.chunk_tokens == 0:
            logp = self.logp(output, targets)
            if not with_entropy:
                return logp, None
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                return logp, self.entropy(output)
        return losses.chunked_scores(output, self.head(model), targets, self.chunk_tokens, self.logp,
                                     self.entropy if with_entropy else None, entropy_grad)

    def head(self, model: Any):
        """GPTModel's own output layer (a ColumnParallelLinear, with the embedding's weight when tied, and
        any forward hook on it: a LoRA adapter on lm_head) as a function of hidden rows [c, h]."""
        core = core_model(model)
        tied = output_weight(model) if core.share_embeddings_and_output_weights else None

        def project(rows: Tensor) -> Tensor:
            logits, _ = core.output_layer(rows.unsqueeze(1), weight=tied)  # [s, b = 1, h] as GPTModel calls it
            return logits.squeeze(1)

        return project
