"""The Megatron backend's training step: micro-batches per DP rank, forward, the shared loss,
backward, gradient finalization and the optimizer step.

Numbers match the torch backend by construction:
- the batch layout is `tandem.trainer.batching`'s (padded or packed micro-batches), the step
  structure is `backend.run_minibatches` and the micro-batch loss is the same
  `losses.PolicyLoss` object;
- the loss of a micro-batch is normalized by the *mini-batch* totals across all DP ranks
  and multiplied by the DP size, because Megatron averages gradients over DP: the
  accumulated gradient is then exactly that of one big forward;
- the per-token scores come from `megatron_head` (vocab-parallel at TP > 1, whole or chunked
  logits by trainer.logprob_chunk_tokens);
- with trainer.moe, the training model's routers consult the engine's routing of the micro-batch
  in every forward (`megatron_routing`), as the torch trainer's do.
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
from tandem.trainer.batching import MicroBatch, collate, micro_batches, split_even
from tandem.trainer.megatron_dist import ParallelLayout
# vocab_parallel_logprobs is re-exported: tests and tools import it from this module.
from tandem.trainer.megatron_head import LossHead, run_model, vocab_parallel_logprobs  # noqa: F401
from tandem.trainer.megatron_routing import reduced_routing_metrics, sequence_major
from tandem.trainer.routing_replay import RoutingReplay, attach_routing

MicroLoss = Callable[[MicroBatch, Tensor, Any], tuple[Tensor, dict[str, Tensor]]]
"""(micro-batch, the last stage's output, the model that made it) -> (loss, metric sums)."""


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

    bf16: bool = False
    routing: RoutingReplay | None = None
    """trainer.moe: the engine's routing, compared with the training model's routers (and replayed)."""

    def __post_init__(self) -> None:
        self.policy_loss = losses.PolicyLoss.from_config(self.tc.loss)
        self.head = LossHead(self.layout.tp, self.vocab_size, self.temperature, self.tc.logprob_chunk_tokens)

    def __call__(self, samples: list[Sample]) -> dict[str, float]:
        self.head.chunk_tokens = self.tc.logprob_chunk_tokens  # trainer settings are read at every step
        metrics = run_minibatches(samples, self.tc.minibatches, prepare=self.prepare, accumulate=self.accumulate,
                                  zero_grads=self.zero_grads, optimizer_step=self.optimizer_step,
                                  lr=lambda: self.optimizer.param_groups[0]["lr"])
        if self.routing is not None:
            from megatron.core import parallel_state as ps

            metrics.update(reduced_routing_metrics(self.routing, ps.get_data_parallel_group(),
                                                   ps.get_pipeline_model_parallel_group(), self.layout.pp,
                                                   self.layout.device))
        return metrics

    # ------------------------------------------------------------------ forward pieces
    def forward(self, model, mb: MicroBatch) -> Tensor:
        """The last stage's output for a micro-batch: logits [b, L, V_pad/tp], or hidden states with
        trainer.logprob_chunk_tokens (megatron_head.run_model). The training model routes with the engine's
        routing in view; agreement is counted in its training forward only (once per micro-batch)."""
        routing = self.routing if model is self.train_model else None
        with routing.micro_batch(sequence_major(mb.routed), torch.is_grad_enabled()) if routing is not None \
                else contextlib.nullcontext():
            return run_model(model, mb, hidden=self.head.chunk_tokens > 0, bf16=self.bf16)

    def logits(self, model, input_ids: Tensor) -> Tensor:
        """Whole logits [b, L, V_pad/tp] of right-padded token ids, whatever the head (tests, tools)."""
        pos = torch.arange(input_ids.shape[1], device=input_ids.device).unsqueeze(0).expand_as(input_ids)
        return model(input_ids, pos, None)

    def micro_loss(self, mb: MicroBatch, output: Tensor, model, num_samples: int,
                   num_tokens: float) -> tuple[Tensor, dict[str, Tensor]]:
        """The shared `PolicyLoss` on the micro-batch's scores, scaled by the DP size (module
        docstring); metric sums unscaled."""
        logp, entropy = self.head.scores(model, output, mb.targets, with_entropy=True,
                                         entropy_grad=self.policy_loss.entropy_coef != 0.0)
        loss, sums = self.policy_loss(logp, lambda: entropy, mb, num_samples, num_tokens)
        return loss * self.layout.dp, sums

    # ------------------------------------------------------------------ batching across ranks
    def micro_batches(self, samples: list[Sample]) -> list[MicroBatch]:
        """This DP rank's share of a mini-batch, as micro-batches (TP/PP peers get the same)."""
        mine = split_even(samples, self.layout.dp)
        share = mine[self.layout.dp_rank] if self.layout.dp_rank < len(mine) else []
        micro = micro_batches(share, self.tc.micro_batch_size, self.tc.max_tokens_per_micro_batch,
                              self.layout.device, self.pad_id)
        if self.routing is not None:
            attach_routing(micro, share, self.tc.micro_batch_size, self.tc.max_tokens_per_micro_batch, self.routing)
        if self.layout.ep > 1:
            micro += self._idle_micro_batches(len(micro))
        return micro

    def _idle_micro_batches(self, have: int) -> list[MicroBatch]:
        """Empty micro-batches that give this rank as many as the busiest data-parallel rank. With expert
        parallelism every rank takes part in each MoE layer's all-to-all, forward and backward, so a rank with
        fewer micro-batches (none, when a mini-batch has fewer samples than ranks) would leave the others
        waiting; it runs empty ones, one padding token without a trained token, which add nothing to the
        gradient or the metrics (Megatron-LM's data loader gives every DP rank the same count for this too)."""
        from megatron.core import parallel_state as ps

        busiest = torch.tensor([have], device=self.layout.device)
        dist.all_reduce(busiest, op=dist.ReduceOp.MAX, group=ps.get_data_parallel_group())
        idle = Sample(prompt_ids=[self.pad_id], response_ids=[self.pad_id], loss_mask=[0], rollout_logprobs=[0.0])
        return [collate([idle], self.layout.device, self.pad_id) for _ in range(int(busiest) - have)]

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
                setattr(mb, attr, self.head.scores(model, self.forward(model, mb), mb.targets, False, False)[0])
            return
        outs = self.run_schedule(model, micro, forward_only=True,
                                 loss_fn=lambda mb, out, m: (out.sum() * 0.0, {
                                     "logp": self.head.scores(m, out, mb.targets, False, False)[0]}))
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
            out = self.forward(m, mb)

            def finish(output):
                loss, stats = loss_fn(mb, output, m)
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

        def loss_fn(mb: MicroBatch, output: Tensor, model) -> tuple[Tensor, dict[str, Tensor]]:
            return self.micro_loss(mb, output, model, len(minibatch), num_tokens)

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
            loss, sums = loss_fn(mb, self.forward(self.train_model, mb), self.train_model)
            if loss.requires_grad:
                loss.backward()
            elif self.routing is not None:
                self.routing.forget_recomputed()  # no backward will recompute this forward's layers
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
