"""Routing replay (R3) and routing agreement in the training forward, for both trainers.

`RoutingReplay` is the trainer-neutral part: each MoE router of the trained model hands it, for
every token position of the micro-batch, the experts the trainer's own router picked (`route`),
and it compares them with the ones the engine recorded (`Sample.routed_experts`, laid out like
the micro-batch by `routed_tensor`). With trainer.moe.routing_replay it answers with the
engine's experts wherever there is a record; positions without one (the last token, padding, a
plug-in that did not ask) keep the router's own top-k. The router then takes its gates at the
experts it is given: its softmax over all experts at those experts (renormalised when the
model's norm_topk_prob is set), so the gradient still reaches the router. This is what slime and
verl do (they overwrite the top-k indices inside the router and gather the scores at them).

How each trainer's routers consult it: `hf_routing_replay` hooks transformers' routers
(`layers.N.mlp.gate`, returning (router logits, top-k weights, top-k expert ids)) in the torch
trainer; the Megatron trainer's routers ask through megatron-core's own replay seam
(`tandem.trainer.megatron_routing`).

Routing agreement counts, in the training forward, the (position, MoE layer) pairs with a record
whose recomputed top-k set equals the engine's, and the positions where every MoE layer agrees.
"""

from __future__ import annotations

import contextlib
from collections import deque
from typing import Any, Iterator

import torch
from torch import Tensor

from tandem.moe import moe_routers, unpack_routing
from tandem.sample import Sample
from tandem.trainer.batching import MicroBatch, micro_batch_groups, token_offsets

NO_RECORD = -1
NO_MOE_LAYERS = ("config key 'trainer.moe': the model has no mixture-of-experts layers to route; turn "
                 "trainer.moe.routing_replay and record_routing off")


def routed_tensor(samples: list[Sample], rows: int, columns: int, offsets: list[tuple[int, int]], num_layers: int,
                  top_k: int) -> Tensor | None:
    """The samples' engine routing as [rows, columns, num_layers, top_k] int32, NO_RECORD where none;
    sample i's positions start at column offsets[i][1] of row offsets[i][0]. None when no sample has any."""
    if not any(s.routed_experts for s in samples):
        return None
    out = torch.full((rows, columns, num_layers, top_k), NO_RECORD, dtype=torch.int32)
    for s, (row, col) in zip(samples, offsets):
        held = unpack_routing(s.routed_experts)
        if not held.size:
            continue
        if held.shape[1] != num_layers * top_k or held.shape[0] > len(s.tokens):
            raise ValueError(f"a sample's routed experts are {held.shape[0]} positions x {held.shape[1]} ids, the "
                             f"model routes {len(s.tokens)} tokens through {num_layers} layers x top-{top_k}")
        out[row, col:col + held.shape[0]] = torch.from_numpy(held).view(-1, num_layers, top_k).to(torch.int32)
    return out


def attach_routing(micro: list[MicroBatch], samples: list[Sample], micro_batch_size: int, max_tokens: int,
                   routing: RoutingReplay) -> None:
    """Give each micro-batch of `samples` (made by `batching.micro_batches` with the same sizes) its samples'
    engine routing, laid out like its tokens (`MicroBatch.routed`; None when none of them has any)."""
    for mb, group in zip(micro, micro_batch_groups(samples, micro_batch_size, max_tokens)):
        rows, columns = mb.input_ids.shape
        routed = routed_tensor(group, rows, columns, token_offsets(group, mb.packed), routing.num_layers,
                               routing.top_k)
        mb.routed = routed.to(mb.input_ids.device) if routed is not None else None


class RoutingReplay:
    """Routing agreement always, the engine's experts when `replay` is set, for routers of `layers` (their
    decoder layer indices, none on a pipeline stage of dense layers; the record holds all `num_layers` of the
    model, dense layers' entries unused)."""

    def __init__(self, layers: list[int], num_layers: int, top_k: int, replay: bool):
        self.layers, self.num_layers, self.top_k, self.replay = sorted(layers), num_layers, top_k, replay
        self.routed: Tensor | None = None
        """The current micro-batch's engine routing ([rows, columns, num_layers, top_k], NO_RECORD where none);
        its positions flattened in row-major order are the router's tokens."""
        self.counting = False
        """Count agreement in this forward (the training forward, once per micro-batch)."""
        self._sums = dict.fromkeys(("pairs", "agree", "positions", "positions_agree"), 0)
        self._position_agree: Tensor | None = None
        self._recomputed: dict[int, deque[Tensor]] = {layer: deque() for layer in self.layers}
        """Per layer, the experts each training forward of a recomputed layer used, oldest first (below)."""

    def set_batch(self, routed: Tensor | None, counting: bool) -> None:
        self.routed, self.counting = routed, counting
        self._position_agree = None

    @contextlib.contextmanager
    def micro_batch(self, routed: Tensor | None, counting: bool) -> Iterator[None]:
        """A forward of one micro-batch with its engine routing in view (`set_batch`, then `end_forward`)."""
        self.set_batch(routed, counting)
        try:
            yield
        finally:
            self.end_forward()

    def route(self, layer: int, own: Tensor) -> Tensor | None:
        """The experts [tokens, top_k] layer `layer`'s router is to use, given its own choice `own`: the engine's
        where recorded (with replay), `own` elsewhere; in a recomputation, what the first pass used; None when
        there is nothing to change. Counts agreement in a counted (training) forward."""
        if self.routed is None and not self.counting:
            return self._recomputing(layer)
        chosen = own if self.routed is None else self._engines_where_recorded(self.routed, layer, own)
        if self.counting and not torch.is_grad_enabled():
            # A training forward without autograd inside the layer: activation recomputation's first pass
            # (megatron's checkpoint, like torch's reentrant one, runs it under no_grad and the layer's forward
            # again in the backward, after this micro-batch's record is gone). Keep what it used for that.
            self._recomputed[layer].append(chosen)
        return chosen

    def _engines_where_recorded(self, routed: Tensor, layer: int, own: Tensor) -> Tensor:
        record = routed[:, :, layer, :].reshape(-1, self.top_k).to(device=own.device, dtype=own.dtype)
        has = record[:, 0] != NO_RECORD
        if self.counting:
            self._count(own, record, has)
        return torch.where(has[:, None], record, own) if self.replay else own

    def _recomputing(self, layer: int) -> Tensor | None:
        """In a backward's recomputation, the experts the layer's first pass used (backwards come in the order
        of their forwards, in megatron's schedules too: oldest first, as megatron-core's REPLAY_BACKWARD)."""
        queue = self._recomputed.get(layer)
        if not queue or not torch.is_grad_enabled():
            return None
        return queue.popleft()

    def forget_recomputed(self) -> None:
        """Drop the kept routing of forwards that get no backward (a micro-batch with nothing to learn)."""
        for queue in self._recomputed.values():
            queue.clear()

    @torch.no_grad()
    def _count(self, own: Tensor, record: Tensor, has: Tensor) -> None:
        same = (own.sort(dim=-1).values == record.sort(dim=-1).values).all(dim=-1) & has
        self._sums["pairs"] += int(has.sum())
        self._sums["agree"] += int(same.sum())
        # A position agrees when every MoE layer does: AND the layers' verdicts as the forward reaches them.
        self._position_agree = same if self._position_agree is None else self._position_agree & same

    def end_forward(self) -> None:
        """After a forward: close a counted forward's per-position tally and forget the micro-batch."""
        if self.counting and self._position_agree is not None and self.routed is not None:
            has = (self.routed[:, :, self.layers[0], 0].reshape(-1) != NO_RECORD)
            has = has.to(self._position_agree.device)
            self._sums["positions"] += int(has.sum())
            self._sums["positions_agree"] += int((self._position_agree & has).sum())
        self.set_batch(None, False)

    def take_sums(self) -> dict[str, int]:
        """The step's tallies so far (pairs, agree, positions, positions_agree); they start again."""
        s, self._sums = self._sums, dict.fromkeys(self._sums, 0)
        self.forget_recomputed()
        return s

    def take_metrics(self) -> dict[str, float]:
        """The step's routing metrics (none when no sample had the engine's routing); the tallies start again."""
        return routing_metrics(self.take_sums())


def routing_metrics(s: dict[str, int]) -> dict[str, float]:
    """routing_agreement (pairs), routing_agreement_tokens (positions; left out without a position tally) and
    routing_recorded_tokens from summed tallies."""
    if not s["pairs"]:
        return {"routing_recorded_tokens": 0.0}
    out = {"routing_agreement": s["agree"] / s["pairs"], "routing_recorded_tokens": float(s["positions"])}
    if s["positions"]:
        out["routing_agreement_tokens"] = s["positions_agree"] / s["positions"]
    return out


def hf_routing_replay(model: torch.nn.Module, replay: bool) -> RoutingReplay:
    """A `RoutingReplay` consulted by forward hooks on every MoE router of a transformers model (torch trainer)."""
    routers = moe_routers(model)
    if not routers:
        raise ValueError(NO_MOE_LAYERS)
    first = next(iter(routers.values()))
    routing = RoutingReplay(list(routers), model.config.get_text_config().num_hidden_layers, int(first.top_k),
                            replay)
    for layer, module in routers.items():
        module.register_forward_hook(_hf_hook(routing, layer))
    return routing


def _hf_hook(routing: RoutingReplay, layer: int):
    def route(module: Any, _args: Any, output: Any) -> Any:
        logits, weights, own = output
        chosen = routing.route(layer, own)
        if chosen is None or chosen is own:
            return None
        gates = torch.softmax(logits, dim=-1, dtype=torch.float32).gather(1, chosen)
        if getattr(module, "norm_topk_prob", False):
            gates = gates / gates.sum(dim=-1, keepdim=True)
        return logits, gates.to(weights.dtype), chosen
    return route
