"""The embedded engine's record of which experts every token was routed to (SGLang's routed-experts capture).

A forward hook on each MoE router (transformers' `*.layers.N.mlp.gate`, whose output is
(router logits, top-k weights, top-k expert ids)) keeps that layer's top-k ids of the last
forward; after a prefill or decode step the scheduler takes them as one [rows, tokens,
num_hidden_layers, top_k] int32 array for the requests that asked. Dense layers' entries are 0,
as in SGLang's capture buffer.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from tandem.moe import moe_routers


class RoutingCapture:
    """Forward hooks on every MoE router of `model`, holding the last forward's top-k expert ids."""

    def __init__(self, model: Any):
        self.routers = moe_routers(model)
        self.num_layers = model.config.get_text_config().num_hidden_layers
        self.top_k = next(iter(self.routers.values())).top_k if self.routers else 0
        self._last: dict[int, torch.Tensor] = {}
        for layer, module in self.routers.items():
            module.register_forward_hook(self._keeper(layer))

    def _keeper(self, layer: int):
        def keep(_module: Any, _args: Any, output: Any) -> None:
            self._last[layer] = output[2]
        return keep

    @property
    def enabled(self) -> bool:
        return bool(self.routers)

    def take(self, rows: int, tokens: int) -> np.ndarray:
        """The last forward's ids as [rows, tokens, num_hidden_layers, top_k] int32 (its input was [rows, tokens])."""
        out = torch.zeros((rows, tokens, self.num_layers, self.top_k), dtype=torch.int32)
        for layer, ids in self._last.items():
            out[:, :, layer, :] = ids.reshape(rows, tokens, self.top_k).to("cpu", torch.int32)
        self._last.clear()
        return out.numpy()
