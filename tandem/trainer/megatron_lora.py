"""LoRA on Megatron's tensor-parallel linear layers, exported as a standard peft adapter.

Each adapter belongs to one HF projection (q_proj, ..., down_proj, lm_head), as peft's do, and
is attached to the Megatron layer that holds that projection, whose output it adds to with a
forward hook (the base weights and their names are untouched):

- column-parallel layers (`linear_qkv` for q/k/v, `linear_fc1` for gate/up, `output_layer` for
  lm_head): A [r, in] is replicated, B is sharded on the output dimension exactly as the base
  weight is (B_q's rows of this rank's query heads, and so on; lm_head's padded vocabulary).
  `h = x A^T` enters the TP region by `copy_to_tensor_model_parallel_region`, whose backward
  all-reduces dh: A's gradient is then the whole one on every rank, and x's is complete.
  A fused layer's update is assembled in its own layout (per query group [q.., k, v]; [gate; up]).
- row-parallel layers (`linear_proj` for o_proj, `linear_fc2` for down_proj): A is sharded on
  the input dimension like the base weight, `h = x_local A_local^T` is summed over TP ranks
  (`reduce_from_tensor_model_parallel_region`), and B [out, r] is replicated.

Replicated parameters get the same gradient on every TP rank, sharded ones carry Megatron's
`tensor_model_parallel` attributes, so clipping and the optimizer treat them as Megatron's own.
Export gathers the shards back into peft's names (`base_model.model.<HF module>.lora_A.weight`).
"""

from __future__ import annotations

import contextlib
import math
import zlib
from typing import Callable, Iterator

import torch
import torch.distributed as dist
from torch import Tensor, nn

from tandem.lora import PEFT_KEY_PREFIX
from tandem.trainer import megatron_convert as conv
from tandem.trainer.megatron_dist import ParallelLayout
from tandem.trainer.megatron_model import layer_offset
from tandem.trainer.megatron_export import gather_pipeline

# HF projection -> (Megatron layer, its parallelism); the fused ones are assembled in `_assemble`.
PROJECTIONS = {
    "q_proj": ("self_attention.linear_qkv", "column"), "k_proj": ("self_attention.linear_qkv", "column"),
    "v_proj": ("self_attention.linear_qkv", "column"), "o_proj": ("self_attention.linear_proj", "row"),
    "gate_proj": ("mlp.linear_fc1", "column"), "up_proj": ("mlp.linear_fc1", "column"),
    "down_proj": ("mlp.linear_fc2", "row"), "lm_head": ("output_layer", "column"),
}
HF_MODULE = {"q_proj": "self_attn.q_proj", "k_proj": "self_attn.k_proj", "v_proj": "self_attn.v_proj",
             "o_proj": "self_attn.o_proj", "gate_proj": "mlp.gate_proj", "up_proj": "mlp.up_proj",
             "down_proj": "mlp.down_proj"}


def hf_module_name(proj: str, layer: int | None) -> str:
    return "lm_head" if proj == "lm_head" else f"model.layers.{layer}.{HF_MODULE[proj]}"


def full_shape(proj: str, shape: conv.ModelShape) -> tuple[int, int]:
    """(out, in) of the HF projection (lm_head: the unpadded vocabulary)."""
    h, hd, ffn = shape.hidden_size, shape.head_dim, shape.ffn_hidden_size
    return {"q_proj": (shape.num_heads * hd, h), "k_proj": (shape.num_kv_heads * hd, h),
            "v_proj": (shape.num_kv_heads * hd, h), "o_proj": (h, shape.num_heads * hd),
            "gate_proj": (ffn, h), "up_proj": (ffn, h), "down_proj": (h, ffn),
            "lm_head": (shape.vocab_size, h)}[proj]


class ProjectionLora(nn.Module):
    """One projection's adapter on this TP rank: A and B, local shards where they are sharded."""

    def __init__(self, proj: str, a: Tensor, b: Tensor):
        from megatron.core.tensor_parallel.layers import set_tensor_model_parallel_attributes

        super().__init__()
        self.proj, self.parallel = proj, PROJECTIONS[proj][1]
        self.lora_A, self.lora_B = nn.Parameter(a), nn.Parameter(b)
        for name in ("lora_A", "lora_B"):
            if (dim := shard_dim(self.parallel, name)) is not None:
                set_tensor_model_parallel_attributes(getattr(self, name), True, dim, 1)

    def low_rank(self, x: Tensor) -> Tensor:
        """x A^T, whole on every TP rank (see the module docstring for each parallelism)."""
        from megatron.core.tensor_parallel.mappings import (copy_to_tensor_model_parallel_region,
                                                            reduce_from_tensor_model_parallel_region)

        h = x @ self.lora_A.T
        if self.parallel == "column":
            return copy_to_tensor_model_parallel_region(h)
        return reduce_from_tensor_model_parallel_region(h)


class LayerLora(nn.Module):
    """The adapters of one Megatron linear layer, and the forward hook that adds their update."""

    def __init__(self, parts: dict[str, ProjectionLora], scale: float,
                 assemble: Callable[[dict[str, Tensor], Tensor], Tensor]):
        super().__init__()
        self.parts = nn.ModuleDict(parts)
        self.scale, self.assemble = scale, assemble
        self.enabled = True

    def hook(self, module: nn.Module, args: tuple, kwargs: dict, output: tuple) -> tuple:
        if not self.enabled:
            return output
        x = args[0]
        deltas = {name: (part.low_rank(x) @ part.lora_B.T) * self.scale for name, part in self.parts.items()}
        out, bias = output
        return out + self.assemble(deltas, out), bias


def _qkv_assembler(shape: conv.ModelShape, tp: int):
    """Local linear_qkv rows: per local query group, its query heads, then its K and V head."""
    groups, hpg, hd = shape.num_kv_heads // tp, shape.heads_per_group, shape.head_dim

    def assemble(d: dict[str, Tensor], out: Tensor) -> Tensor:
        lead = out.shape[:-1]
        pieces = [d[name].reshape(*lead, groups, width) if name in d else out.new_zeros(*lead, groups, width)
                  for name, width in (("q_proj", hpg * hd), ("k_proj", hd), ("v_proj", hd))]
        return torch.cat(pieces, dim=-1).reshape(out.shape)
    return assemble


def _glu_assembler(ffn_local: int):
    """Local linear_fc1 rows: this rank's gate rows, then its up rows."""
    def assemble(d: dict[str, Tensor], out: Tensor) -> Tensor:
        lead = out.shape[:-1]
        return torch.cat([d.get(n, out.new_zeros(*lead, ffn_local)) for n in ("gate_proj", "up_proj")], dim=-1)
    return assemble


def _single(d: dict[str, Tensor], out: Tensor) -> Tensor:
    (delta,) = d.values()
    return delta


def shard_dim(parallel: str, name: str) -> int | None:
    """The dimension TP shards `name` (lora_A or lora_B) on: column-parallel B on its output rows,
    row-parallel A on its input columns; None: replicated."""
    return {("column", "lora_B"): 0, ("row", "lora_A"): 1}.get((parallel, name))


def peft_key(proj: str, layer: int | None, name: str) -> str:
    return f"{PEFT_KEY_PREFIX}{hf_module_name(proj, layer)}.{name}.weight"


def shard_of(proj: str, name: str, full: Tensor, shape: conv.ModelShape, layout: ParallelLayout) -> Tensor:
    """This TP rank's piece of an HF adapter tensor (`name`: lora_A or lora_B)."""
    if proj == "lm_head" and name == "lora_B":
        full = conv.pad_vocab_rows(full, shape)
    dim = shard_dim(PROJECTIONS[proj][1], name)
    return full.clone() if dim is None else torch.chunk(full, layout.tp, dim=dim)[layout.tp_rank].contiguous()


def _init_full(proj: str, layer: int | None, rank: int, shape: conv.ModelShape, seed: int) -> dict[str, Tensor]:
    """peft's initialization (A: kaiming-uniform with a = sqrt(5), B: 0), from a generator keyed by
    the module, so every TP rank draws the same full A and keeps its own piece."""
    out_f, in_f = full_shape(proj, shape)
    gen = torch.Generator().manual_seed(zlib.crc32(f"{seed}:{proj}:{layer}".encode()))
    bound = 1.0 / math.sqrt(in_f)  # kaiming_uniform_(a=sqrt(5)) on [r, in]: gain sqrt(1/3), U(+-sqrt(3)*gain/sqrt(in))
    a = (torch.rand(rank, in_f, generator=gen) * 2 - 1) * bound
    return {"lora_A": a, "lora_B": torch.zeros(out_f, rank)}


def attach(model: nn.Module, shape: conv.ModelShape, layout: ParallelLayout, lora, seed: int) -> list[LayerLora]:
    """Freeze the model and give every targeted projection of this stage an adapter; returns them."""
    model.requires_grad_(False)
    scale = lora.alpha / lora.rank
    offset = layer_offset(model)
    attached = []
    for local, module in list(_targets(model, lora.target_modules)):
        _check_layer(local, module)
        layer = _layer_of(local, offset)
        projections = [p for p in lora.target_modules if PROJECTIONS[p][0] == _suffix(local)]
        parts = {}
        for proj in projections:
            full = _init_full(proj, layer, lora.rank, shape, seed)
            parts[proj] = ProjectionLora(proj, *(shard_of(proj, k, full[k], shape, layout).to(layout.device)
                                                 for k in ("lora_A", "lora_B")))
        suffix = _suffix(local)
        assemble = (_qkv_assembler(shape, layout.tp) if suffix == "self_attention.linear_qkv" else
                    _glu_assembler(shape.ffn_hidden_size // layout.tp) if suffix == "mlp.linear_fc1" else _single)
        layer_lora = LayerLora(parts, scale, assemble)
        module.lora = layer_lora
        module.register_forward_hook(layer_lora.hook, with_kwargs=True)
        attached.append(layer_lora)
    return attached


def _check_layer(local: str, module: nn.Module) -> None:
    """The hook math assumes Megatron's own TP linears without sequence parallelism (the local spec
    tandem builds): a fused-norm or sequence-parallel layer would hand the hook another input."""
    from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear

    parallel = next(p for t, (name, p) in PROJECTIONS.items() if name == _suffix(local))
    expected = ColumnParallelLinear if parallel == "column" else RowParallelLinear
    if type(module) is not expected or getattr(module, "sequence_parallel", False):
        raise NotImplementedError(f"LoRA on {local}: a {type(module).__name__}"
                                  f"{' with sequence parallelism' if getattr(module, 'sequence_parallel', False) else ''}"
                                  f" is not supported, only megatron.core's {expected.__name__} without it")


def _split(local: str) -> tuple[int | None, str]:
    """A module name -> (its local layer index or None, the name within the layer)."""
    parts = local.split(".")
    if len(parts) > 3 and local.startswith("decoder.layers.") and parts[2].isdigit():
        return int(parts[2]), ".".join(parts[3:])
    return None, local


def _suffix(local: str) -> str:
    return _split(local)[1]


def _layer_of(local: str, offset: int) -> int | None:
    layer = _split(local)[0]
    return None if layer is None else layer + offset


def _targets(model: nn.Module, targets: list[str]) -> Iterator[tuple[str, nn.Module]]:
    wanted = {PROJECTIONS[t][0] for t in targets}
    for local, module in model.named_modules():
        if local and _suffix(local) in wanted and hasattr(module, "weight"):
            yield local, module


def _adapter_params(model: nn.Module) -> Iterator[tuple[int | None, ProjectionLora]]:
    offset = layer_offset(model)
    for local, module in model.named_modules():
        if isinstance(module, LayerLora):
            owner = local.removesuffix(".lora")
            for part in module.parts.values():
                yield _layer_of(owner, offset), part


def gather_adapter(model: nn.Module, layout: ParallelLayout, shape: conv.ModelShape,
                   value_of: Callable[[Tensor], Tensor], dtype: torch.dtype) -> dict[str, Tensor]:
    """`value_of(lora param)` of every adapter as whole peft tensors on global rank 0 ({} elsewhere).
    A collective, like `megatron_export.gather_hf`."""
    from megatron.core import parallel_state as ps

    out: dict[str, Tensor] = {}
    if layout.dp_rank == 0:
        for layer, part in _adapter_params(model):
            for name in ("lora_A", "lora_B"):
                data = value_of(getattr(part, name)).contiguous()
                dim = shard_dim(part.parallel, name)
                if layout.tp > 1 and dim is not None:
                    pieces = [torch.empty_like(data) for _ in range(layout.tp)]
                    dist.all_gather(pieces, data, group=ps.get_tensor_model_parallel_group())
                    data = torch.cat(pieces, dim=dim)
                if part.proj == "lm_head" and name == "lora_B":
                    data = data[: shape.vocab_size]
                if layout.tp_rank == 0:
                    out[peft_key(part.proj, layer, name)] = data.to("cpu", dtype=dtype, copy=True)
        if layout.pp > 1 and layout.tp_rank == 0:
            out = gather_pipeline(out, layout)
    return out if layout.is_main_process else {}


@torch.no_grad()
def load_adapter(model: nn.Module, tensors: dict[str, Tensor], shape: conv.ModelShape, layout: ParallelLayout) -> None:
    """Set this rank's adapter pieces from whole peft tensors (every rank passes the same dict)."""
    for layer, part in _adapter_params(model):
        for name in ("lora_A", "lora_B"):
            key = peft_key(part.proj, layer, name)
            if key not in tensors:
                raise KeyError(f"the adapter has no {key}")
            getattr(part, name).copy_(shard_of(part.proj, name, tensors[key].float(), shape, layout))


@contextlib.contextmanager
def disabled(layers: list[LayerLora]) -> Iterator[None]:
    """The base model: every adapter off (the KL reference, without a second copy of the weights)."""
    for layer in layers:
        layer.enabled = False
    try:
        yield
    finally:
        for layer in layers:
            layer.enabled = True
