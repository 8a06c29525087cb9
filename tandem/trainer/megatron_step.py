"""The Megatron backend's training step: micro-batches per DP rank, forward, the shared loss,
backward, gradient finalization and the optimizer step.

Numbers match the torch backend by construction:
- the batch layout is `tandem.trainer.batching`'s, the step structure is
  `backend.run_minibatches` and the micro-batch loss is the same `losses.PolicyLoss` object;
- the loss of a micro-batch is normalized by the *mini-batch* totals across all DP ranks
  and multiplied by the DP size, because Megatron averages gradients over DP: the
  accumulated gradient is then exactly that of one big forward;
- with TP > 1 the logits are vocab-parallel ([b, L, V/tp] per rank). Log-probs and entropy
  are computed without gathering the vocab (max / sum-exp / target logit all-reduced over
  TP, as Megatron's own vocab-parallel cross entropy does); at TP = 1
  `losses.token_logprobs` / `entropy_from_logits` are called directly. The padded vocab
  rows never get probability mass (masked to -inf).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Iterator

import torch
import torch.distributed as dist
from torch import Tensor

from tandem import losses
from tandem.config import TrainerConfig
from tandem.sample import Sample
from tandem.trainer.backend import run_minibatches
from tandem.trainer.batching import MicroBatch, chunks, collate, split_even
from tandem.trainer.megatron_dist import ParallelLayout

MicroLoss = Callable[[MicroBatch, Tensor], tuple[Tensor, dict[str, Tensor]]]


def vocab_parallel_logprobs(logits: Tensor, targets: Tensor, temperature: float, vocab_size: int,
                            with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    """Per-token log p(target) at `temperature`, and entropy of the untempered softmax, from
    vocab-parallel logits [..., V_padded/tp] - without gathering the vocab.

    Same definitions as `losses.token_logprobs` / `losses.entropy_from_logits` (which the
    TP = 1 path calls directly); the tests check the two agree. Padded vocab columns are
    -inf. Differentiable: the all-reduces are Megatron's reduce_from_tensor_model_parallel_region
    (all-reduce forward, identity backward), valid because everything after them is
    computed identically on every TP rank.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as tp_sum

    group = ps.get_tensor_model_parallel_group()
    part = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * part
    valid = (torch.arange(start, start + part, device=logits.device) < vocab_size)

    def lse_parts(x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        x = x.masked_fill(~valid, float("-inf"))
        gmax = x.detach().max(dim=-1).values
        dist.all_reduce(gmax, op=dist.ReduceOp.MAX, group=group)
        shifted = torch.exp(x - gmax.unsqueeze(-1))
        total = tp_sum(shifted.sum(-1))
        return x, gmax, shifted, total

    x = logits.float()
    xt = x / temperature if temperature != 1.0 else x
    xt, gmax, _, total = lse_parts(xt)
    local_t = targets - start
    here = (local_t >= 0) & (local_t < part)
    picked = torch.gather(xt, -1, local_t.clamp(0, part - 1).unsqueeze(-1)).squeeze(-1)
    picked = tp_sum(torch.where(here, picked, torch.zeros_like(picked)))
    logp = picked - (gmax + torch.log(total))
    if not with_entropy:
        return logp, None
    xr, rmax, rexp, rtotal = lse_parts(x)
    # H = logsumexp(x) - sum(p * x). Padded columns have p = 0 and x = -inf: zero x there
    # (not the product, whose backward would be 0 * inf = nan).
    px = tp_sum((rexp * xr.masked_fill(~valid, 0.0)).sum(-1))
    entropy = (rmax + torch.log(rtotal)) - px / rtotal
    return logp, entropy


@dataclass(eq=False)
class MegatronTrainStep:
    """`train_step` of the Megatron backend over models and an optimizer built elsewhere.

    `train_model` is what runs forward/backward (DDP-wrapped on GPU); `ref_model` is the
    frozen KL reference or None, scored inside `ref_context()` (with LoRA: the train model with
    its adapters off). `tc` is read at every step, like the torch backend does.
    """

    tc: TrainerConfig
    layout: ParallelLayout
    tconfig: Any  # megatron.core TransformerConfig; the pipeline schedule reads its grad hook
    train_model: Any
    ref_model: Any
    optimizer: Any
    vocab_size: int
    temperature: float
    pad_id: int
    optimizer_steps: int = 0
    ref_context: Callable[[], ContextManager] = contextlib.nullcontext

    def __post_init__(self) -> None:
        self.policy_loss = losses.PolicyLoss.from_config(self.tc.loss)

    def __call__(self, samples: list[Sample]) -> dict[str, float]:
        return run_minibatches(samples, self.tc.minibatches, prepare=self.prepare, accumulate=self.accumulate,
                               zero_grads=self.zero_grads, optimizer_step=self.optimizer_step,
                               lr=lambda: self.optimizer.param_groups[0]["lr"])

    # ------------------------------------------------------------------ forward pieces
    def forward(self, model, input_ids: Tensor) -> Tensor:
        """Model output for a micro-batch: logits [b, L, V_pad/tp] on the last stage."""
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)
        return model(input_ids, pos, None)

    def scores(self, logits: Tensor, targets: Tensor, with_entropy: bool) -> tuple[Tensor, Tensor | None]:
        """(logp [b, L-1], entropy [b, L-1] or None) of the shifted targets."""
        logits = logits[:, :-1]
        if self.layout.tp == 1:
            logits = logits[..., : self.vocab_size]  # drop padded vocab columns
            logp = losses.token_logprobs(logits, targets, self.temperature)
            return logp, losses.entropy_from_logits(logits) if with_entropy else None
        return vocab_parallel_logprobs(logits, targets, self.temperature, self.vocab_size, with_entropy)

    def micro_loss(self, mb: MicroBatch, logits: Tensor, num_samples: int,
                   num_tokens: float) -> tuple[Tensor, dict[str, Tensor]]:
        """The shared `PolicyLoss` on (possibly vocab-parallel) logits, scaled by the DP size
        (module docstring); metric sums unscaled."""
        logp, _ = self.scores(logits, mb.targets, with_entropy=False)
        loss, sums = self.policy_loss(logp, lambda: self.scores(logits, mb.targets, with_entropy=True)[1], mb,
                                      num_samples, num_tokens)
        return loss * self.layout.dp, sums

    # ------------------------------------------------------------------ batching across ranks
    def micro_batches(self, samples: list[Sample]) -> list[MicroBatch]:
        """This DP rank's share of a mini-batch, as micro-batches (TP/PP peers get the same)."""
        mine = split_even(samples, self.layout.dp)
        share = mine[self.layout.dp_rank] if self.layout.dp_rank < len(mine) else []
        return [collate(c, self.layout.device, self.pad_id) for c in chunks(share, self.tc.micro_batch_size)]

    def prepare(self, minibatch: list[Sample], with_old_logp: bool) -> tuple[list[Sample], list[MicroBatch]]:
        micro = self.micro_batches(minibatch)
        if with_old_logp:
            self.score_into(micro, "old_logp", self.train_model)
        if self.ref_model is not None:
            with self.ref_context():
                self.score_into(micro, "ref_logp", self.ref_model)
        return minibatch, micro

    @torch.no_grad()
    def score_into(self, micro: list[MicroBatch], attr: str, model) -> None:
        """Fill mb.old_logp / mb.ref_logp with a no-grad forward (on the last pipeline stage)."""
        if self.layout.pp == 1:
            for mb in micro:
                setattr(mb, attr, self.scores(self.forward(model, mb.input_ids), mb.targets, False)[0])
            return
        outs = self.run_schedule(model, micro, forward_only=True,
                                 loss_fn=lambda mb, logits: (logits.sum() * 0.0, {
                                     "logp": self.scores(logits, mb.targets, False)[0]}))
        if self.layout.last_stage:
            for mb, out in zip(micro, outs):
                setattr(mb, attr, out["logp"])

    def run_schedule(self, model, micro: list[MicroBatch], forward_only: bool, loss_fn: MicroLoss) -> list[dict]:
        """Megatron's pipeline schedule (PP > 1, CUDA only) over our micro-batches and loss."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        if not micro:
            raise RuntimeError("a data-parallel rank got no samples; with pipeline parallelism every "
                               "mini-batch needs at least as many samples as data-parallel ranks")
        n = len(micro)

        def forward_step(data_iterator: Iterator[MicroBatch], m):
            mb = next(data_iterator)
            out = self.forward(m, mb.input_ids)

            def finish(output):
                loss, stats = loss_fn(mb, output)
                return loss * n, stats  # Megatron divides a 2-tuple loss by num_microbatches

            return out, finish

        return get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=iter(micro), model=[model], num_microbatches=n,
            seq_length=max(mb.input_ids.shape[1] for mb in micro),
            micro_batch_size=max(mb.input_ids.shape[0] for mb in micro), forward_only=forward_only)

    # ------------------------------------------------------------------ one mini-batch
    def accumulate(self, prepared: tuple[list[Sample], list[MicroBatch]]) -> dict[str, float]:
        """Forward/backward this rank's micro-batches of one mini-batch; grads accumulate
        (in .grad on CPU, in DDP's buffers on GPU). Returns metric sums over every rank."""
        minibatch, micro = prepared
        num_tokens = float(sum(sum(s.loss_mask) for s in minibatch))

        def loss_fn(mb: MicroBatch, logits: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
            return self.micro_loss(mb, logits, len(minibatch), num_tokens)

        if self.layout.pp == 1:
            stats = self._backward_each(micro, loss_fn)
        else:
            self.tconfig.finalize_model_grads_func = _finalize_grads
            stats = self.run_schedule(self.train_model, micro, forward_only=False, loss_fn=loss_fn)
        out = self._sum_over_ranks(stats)
        out["tokens"] = num_tokens
        return out

    def _backward_each(self, micro: list[MicroBatch], loss_fn: MicroLoss) -> list[dict[str, Tensor]]:
        stats = []
        for mb in micro:
            loss, sums = loss_fn(mb, self.forward(self.train_model, mb.input_ids))
            if loss.requires_grad:
                loss.backward()
            stats.append(sums)
        # What Megatron's schedule calls after the last backward: DP reduction, and the sum
        # over TP of the q/k-layernorm grads (each TP rank only normalizes its own heads).
        if self.layout.cuda:
            _finalize_grads([self.train_model])
        else:
            self.optimizer.finalize_grads()
        return stats

    def _sum_over_ranks(self, stats: list[dict[str, Tensor]]) -> dict[str, float]:
        """Sums live on the last stage, one share per DP rank: add them up on every rank
        (over DP, then over PP where the other stages contribute zeros)."""
        from megatron.core import parallel_state as ps

        keys = losses.PolicyLoss.METRICS
        totals = torch.zeros(len(keys), dtype=torch.float64, device=self.layout.device)
        for s in stats:
            totals += torch.stack([s[k].double() for k in keys])
        dist.all_reduce(totals, group=ps.get_data_parallel_group())
        if self.layout.pp > 1:
            dist.all_reduce(totals, group=ps.get_pipeline_model_parallel_group())
        return dict(zip(keys, totals.tolist()))

    def zero_grads(self) -> None:
        if self.layout.cuda:
            self.train_model.zero_grad_buffer()
        self.optimizer.zero_grad()

    def optimizer_step(self) -> tuple[float, bool]:
        ok, norm, _ = self.optimizer.step()
        norm = float(norm) if norm is not None else float("nan")
        if ok:
            self.optimizer_steps += 1
        return norm, bool(ok)


def _finalize_grads(*args, **kwargs):
    """What Megatron's schedule calls after the last backward: DP grad reduction, tied-embedding sync."""
    from megatron.core.distributed import finalize_model_grads

    return finalize_model_grads(*args, **kwargs)
