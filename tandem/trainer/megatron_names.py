"""Megatron parameter names with global layer and expert indices, and which layers a Qwen3-MoE makes MoE.

Megatron names a layer by its index on its pipeline stage (`decoder.layers.{i}`) and an expert by its
index on its expert-parallel rank (`mlp.experts.local_experts.{j}`); tandem's converter and export
name both globally: layer = the stage's first layer + i, expert = ep_rank x E / EP + j
(megatron-core's contiguous split, `experts_of_rank`). `tandem.trainer.megatron_convert` uses these.
"""

from __future__ import annotations

import re
from typing import Iterable


def moe_layers(num_layers: int, num_experts: int, sparse_step: int, mlp_only: Iterable[int]) -> tuple[int, ...]:
    """HF Qwen3-MoE's rule: layer i is MoE unless listed in mlp_only_layers, when (i + 1) % decoder_sparse_step == 0."""
    if num_experts <= 0 or sparse_step <= 0:
        return ()
    return tuple(i for i in range(num_layers) if i not in set(mlp_only) and (i + 1) % sparse_step == 0)


_LAYER_PREFIX = "decoder.layers."


def split_layer_name(mg_name: str) -> tuple[int | None, str]:
    """'decoder.layers.3.mlp.linear_fc2.weight' -> (3, 'mlp.linear_fc2.weight'); non-layer -> (None, name)."""
    if not mg_name.startswith(_LAYER_PREFIX):
        return None, mg_name
    idx, _, rest = mg_name[len(_LAYER_PREFIX):].partition(".")
    return int(idx), rest


def layer_name(layer: int, rest: str) -> str:
    return f"{_LAYER_PREFIX}{layer}.{rest}"


_EXPERT = re.compile(r"^(?P<stem>mlp\.experts\.local_experts)\.(?P<e>\d+)\.(?P<rest>.*)$")


def experts_of_rank(num_experts: int, ep: int, ep_rank: int) -> range:
    """The global indices of the experts expert-parallel rank `ep_rank` holds (megatron-core's contiguous split)."""
    per_rank = num_experts // ep
    return range(ep_rank * per_rank, (ep_rank + 1) * per_rank)


def expert_index(mg_name: str) -> int | None:
    """The expert index in an expert parameter's name ('...local_experts.{e}.linear_fc1.weight'); None otherwise."""
    m = _EXPERT.match(split_layer_name(mg_name)[1])
    return None if m is None else int(m["e"])


def with_expert(mg_name: str, expert: int) -> str:
    """`mg_name` naming expert `expert` instead (local <-> global expert indices)."""
    layer, rest = split_layer_name(mg_name)
    renamed = _EXPERT.sub(lambda m: f"{m['stem']}.{expert}.{m['rest']}", rest)
    return renamed if layer is None else layer_name(layer, renamed)
