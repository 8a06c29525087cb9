"""Routing replay and routing agreement in the Megatron trainer (trainer.moe).

megatron-core 0.16.1 routes through one seam: every TopKRouter asks its `router_replay` object for
the top-k (`get_replay_topk(scores, topk, num_groups, group_topk, default_compute_topk)`, in
`moe_utils.topk_routing_with_score_function`), and gathers its gates from `scores` at the
experts it gets back. Its own RouterReplay replays whole recorded tensors; here each router gets
a `_ConsultedRouter` instead, which computes the router's own top-k and hands it to the shared
`RoutingReplay` (tandem.trainer.routing_replay): the engine's experts where the sample has a
record, the router's own elsewhere, agreement counted either way.

The gates stay the router's: with norm_topk_prob (megatron's moe_router_pre_softmax off) `scores`
are the logits and megatron takes the softmax over the k gathered ones, i.e. the renormalised
router probabilities; without it `scores` are the softmax over all experts, gathered as they are.
Either way the gradient reaches the router, as in the torch trainer.

Token order: megatron's hidden states are [sequence, batch, hidden] and the router flattens them
sequence-major, so a micro-batch's routing ([rows, columns, layers, top_k]) is handed over
transposed. Packed micro-batches are one row ('thd'), where both orders agree.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from tandem.trainer.megatron_convert import ModelShape
from tandem.trainer.routing_replay import NO_MOE_LAYERS, RoutingReplay, routing_metrics


class _ConsultedRouter:
    """Stands in for megatron-core's RouterReplay on one router: its top-k, then what `routing` makes of it."""

    def __init__(self, routing: RoutingReplay, layer: int):
        self.routing, self.layer = routing, layer

    def get_replay_topk(self, scores: Tensor, topk: int, num_groups: int | None = None, group_topk: int | None = None,
                        default_compute_topk: Callable[..., tuple[Tensor, Tensor]] | None = None
                        ) -> tuple[Tensor, Tensor]:
        if default_compute_topk is None:  # megatron-core passes its own top-k; without it there is nothing to consult
            raise TypeError("get_replay_topk needs megatron-core's default_compute_topk")
        values, own = default_compute_topk(scores, topk, num_groups=num_groups, group_topk=group_topk)
        chosen = self.routing.route(self.layer, own)
        if chosen is None or chosen is own:
            return values, own
        return scores.gather(1, chosen), chosen


def megatron_routers(model: Any) -> dict[int, Any]:
    """{global decoder layer index: its TopKRouter} of this pipeline stage's (unwrapped) GPTModel."""
    return {layer.layer_number - 1: layer.mlp.router for layer in model.decoder.layers
            if getattr(layer.mlp, "router", None) is not None}


def megatron_routing_replay(model: Any, shape: ModelShape, replay: bool) -> RoutingReplay:
    """A `RoutingReplay` every MoE router of `model` (this stage's layers: maybe none) consults."""
    if not shape.moe_layers:
        raise ValueError(NO_MOE_LAYERS)
    routers = megatron_routers(model)
    routing = RoutingReplay(list(routers), shape.num_layers, shape.moe_top_k, replay)
    for layer, router in routers.items():
        router.router_replay = _ConsultedRouter(routing, layer)
    return routing


def sequence_major(routed: Tensor | None) -> Tensor | None:
    """A micro-batch's routing [rows, columns, layers, top_k] in megatron's token order ([columns, rows, ...])."""
    return None if routed is None else routed.transpose(0, 1).contiguous()


def reduced_routing_metrics(routing: RoutingReplay, dp_group: Any, pp_group: Any, pp: int,
                            device: torch.device) -> dict[str, float]:
    """The step's routing metrics over every rank: (token, layer) pairs summed over data parallel and pipeline
    stages (each stage routes its own layers); whole-token agreement needs every layer's verdict, which one
    stage holds only without pipeline parallelism, so with PP > 1 it is left out."""
    sums = routing.take_sums()
    keys = list(sums)
    totals = torch.tensor([float(sums[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(totals, group=dp_group)
    pairs = totals[:2].clone()
    if pp > 1:
        dist.all_reduce(pairs, group=pp_group)
    metrics = routing_metrics(dict(zip(keys, totals.tolist())) | dict(zip(keys[:2], pairs.tolist())))
    if pp > 1:
        metrics.pop("routing_agreement_tokens", None)
    return metrics
