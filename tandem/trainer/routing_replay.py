"""Routing replay (R3) and routing agreement in the torch trainer's forward.

A forward hook on every MoE router of the trained model (transformers' `layers.N.mlp.gate`,
returning (router logits, top-k weights, top-k expert ids)) sees, for every token position of
the micro-batch, the experts the trainer's own router picked, and compares them with the ones
the engine recorded (`Sample.routed_experts`, laid out like the micro-batch by `routed_tensor`).

With trainer.moe.routing_replay the hook replaces the router's choice by the engine's wherever
there is a record: the experts are the engine's, the gates are the router's softmax over all
experts taken at those experts (renormalised when the model's norm_topk_prob is set), so the
gradient still reaches the router. This is what slime and verl do (they overwrite the top-k
indices inside the router and gather the scores at them); positions without a record (the last
token, padding, a plug-in that did not ask) keep the router's own top-k.

Routing agreement counts, in the training forward, the (position, MoE layer) pairs with a record
whose recomputed top-k set equals the engine's, and the positions where every MoE layer agrees.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from tandem.moe import moe_routers, unpack_routing
from tandem.sample import Sample

NO_RECORD = -1


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


class RoutingReplay:
    """Hooks on `model`'s MoE routers: routing agreement always, replay when `replay` is set."""

    def __init__(self, model: torch.nn.Module, replay: bool):
        self.routers = moe_routers(model)
        if not self.routers:
            raise ValueError("config key 'trainer.moe': the model has no mixture-of-experts layers to route "
                             "(no layers.N.mlp.gate router); turn trainer.moe.routing_replay and record_routing off")
        first = next(iter(self.routers.values()))
        self.num_layers = model.config.get_text_config().num_hidden_layers
        self.top_k = int(first.top_k)
        self.replay = replay
        self.routed: Tensor | None = None
        """The current micro-batch's engine routing ([b, T, num_layers, top_k], NO_RECORD where none)."""
        self.counting = False
        """Count agreement in this forward (the training forward, once per micro-batch)."""
        self._sums = dict.fromkeys(("pairs", "agree", "positions", "positions_agree"), 0)
        self._position_agree: Tensor | None = None
        for layer, module in self.routers.items():
            module.register_forward_hook(self._hook(layer))

    def set_batch(self, routed: Tensor | None, counting: bool) -> None:
        self.routed, self.counting = routed, counting
        self._position_agree = None

    def _hook(self, layer: int):
        def route(module: Any, _args: Any, output: Any) -> Any:
            if self.routed is None:
                return None
            logits, weights, own = output
            record = self.routed[:, :, layer, :].reshape(-1, self.top_k).to(own.dtype)
            has = record[:, 0] != NO_RECORD
            if self.counting:
                self._count(own, record, has)
            if not self.replay:
                return None
            chosen = torch.where(has[:, None], record, own)
            gates = torch.softmax(logits, dim=-1, dtype=torch.float32).gather(1, chosen)
            if getattr(module, "norm_topk_prob", False):
                gates = gates / gates.sum(dim=-1, keepdim=True)
            return logits, gates.to(weights.dtype), chosen
        return route

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
            has = (self.routed[:, :, next(iter(self.routers)), 0].reshape(-1) != NO_RECORD)
            has = has.to(self._position_agree.device)
            self._sums["positions"] += int(has.sum())
            self._sums["positions_agree"] += int((self._position_agree & has).sum())
        self.set_batch(None, False)

    def take_metrics(self) -> dict[str, float]:
        """The step's routing metrics (none when no sample had the engine's routing); the tallies start again."""
        s, self._sums = self._sums, dict.fromkeys(self._sums, 0)
        if not s["pairs"]:
            return {"routing_recorded_tokens": 0.0}
        return {"routing_agreement": s["agree"] / s["pairs"],
                "routing_agreement_tokens": s["positions_agree"] / s["positions"],
                "routing_recorded_tokens": float(s["positions"])}
