"""What leaves the Megatron ranks: HF-named tensors gathered from TP shards and PP stages, and
each rank's own checkpoint state.

`gather_hf` all-gathers the TP shards in each TP group of DP rank 0 and sends the later
pipeline stages' tensors to global rank 0, which converts them to HF names
(`megatron_convert`); every other rank gets an empty dict after taking part. With expert
parallelism the experts are all-gathered in the expert-parallel group of expert-DP rank 0
(which holds DP rank 0): each member holds E / EP different experts. Checkpoints
are not gathered: each rank saves and restores its own shard (same layout required).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from tandem.trainer import megatron_convert as conv
from tandem.trainer.megatron_dist import ParallelLayout
from tandem.trainer.megatron_model import global_name, layer_offset


def gather_hf(model, layout: ParallelLayout, shape: conv.ModelShape, value_of: Callable[[Tensor], Tensor],
              dtype: torch.dtype) -> dict[str, Tensor]:
    """`value_of(param)` for every parameter of the unwrapped `model`, as full HF tensors in
    `dtype` on CPU on global rank 0; {} elsewhere. A collective: every rank must call it."""
    from megatron.core import parallel_state as ps

    out: dict[str, Tensor] = {}
    experts_gathered = layout.ep > 1 and ps.get_expert_data_parallel_rank() == 0
    if layout.dp_rank == 0 or experts_gathered:
        tp_group = ps.get_tensor_model_parallel_group()
        offset = layer_offset(model)
        for local, param in model.named_parameters():
            if ".lora." in local:
                continue  # LoRA adapters: tandem.trainer.megatron_lora gathers them
            name = global_name(local, offset)
            if name == "output_layer.weight" and shape.tie_embeddings:
                continue  # last stage's copy of the tied embedding
            if layout.ep > 1 and conv.expert_index(name) is not None:
                out.update(_gathered_experts(name, value_of(param), layout, shape, dtype))
                continue
            if layout.dp_rank != 0:
                continue
            data = value_of(param)
            if layout.tp > 1 and conv.tp_split_kind(name) != "replicated":
                parts = [torch.empty_like(data) for _ in range(layout.tp)]
                dist.all_gather(parts, data.contiguous(), group=tp_group)
                full = conv.unshard(name, parts)
            else:
                full = data
            if layout.tp_rank == 0:
                for hf_name, t in conv.megatron_full_to_hf(name, full, shape).items():
                    out[hf_name] = t.to("cpu", dtype=dtype, copy=True)
        if layout.pp > 1 and layout.tp_rank == 0 and layout.dp_rank == 0:
            out = gather_pipeline(out, layout)
    return out if layout.is_main_process else {}


def _gathered_experts(local_name: str, data: Tensor, layout: ParallelLayout, shape: conv.ModelShape,
                      dtype: torch.dtype) -> dict[str, Tensor]:
    """One local expert's tensor from every expert-parallel rank (all-gathered), in HF names on the member
    with DP rank 0; {} on the others, which take part."""
    from megatron.core import parallel_state as ps

    parts = [torch.empty_like(data) for _ in range(layout.ep)]
    dist.all_gather(parts, data.contiguous(), group=ps.get_expert_model_parallel_group())
    if layout.dp_rank != 0:
        return {}
    local = conv.expert_index(local_name)
    if local is None:
        raise ValueError(f"{local_name} is not an expert's parameter")
    out: dict[str, Tensor] = {}
    for ep_rank, part in enumerate(parts):
        name = conv.with_expert(local_name, conv.experts_of_rank(shape.num_experts, layout.ep, ep_rank).start + local)
        for hf_name, t in conv.megatron_full_to_hf(name, part, shape).items():
            out[hf_name] = t.to("cpu", dtype=dtype, copy=True)
    return out


def gather_pipeline(mine: dict[str, Tensor], layout: ParallelLayout) -> dict[str, Tensor]:
    """Send every later stage's tensors to global rank 0 (first stage), one tensor at a time."""
    from megatron.core import parallel_state as ps

    ranks = dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group())
    if layout.pp_rank != 0:
        sent = [[(k, tuple(v.shape), str(v.dtype)) for k, v in mine.items()]]
        dist.send_object_list(sent, dst=ranks[0])
        for v in mine.values():
            dist.send(v.to(layout.device), dst=ranks[0])
        return {}
    for src in ranks[1:]:
        meta: list[Any] = [None]
        dist.recv_object_list(meta, src=src)
        for name, shape_, dtype in meta[0]:
            buf = torch.empty(shape_, dtype=getattr(torch, dtype.split(".")[-1]), device=layout.device)
            dist.recv(buf, src=src)
            mine[name] = buf.cpu()
    return mine


def accumulated_grad(param: Tensor) -> Tensor:
    """A parameter's accumulated gradient: DDP's main_grad on GPU (already DP-reduced), .grad on
    CPU, zeros where there is none."""
    g = getattr(param, "main_grad", None)
    g = param.grad if g is None else g
    return torch.zeros_like(param, dtype=torch.float32) if g is None else g.detach()


# --------------------------------------------------------------------------- checkpoints (per rank)
def layout_key(layout: ParallelLayout) -> dict[str, int]:
    key = {"tp": layout.tp, "pp": layout.pp, "dp": layout.dp}
    return key | {"ep": layout.ep} if layout.ep > 1 else key  # dense checkpoints keep their key


def _optimizer_parts(optimizer) -> list:
    return getattr(optimizer, "chained_optimizers", [optimizer])


def rank_state(model, optimizer, layout: ParallelLayout, optimizer_steps: int,
               trainable_only: bool = False) -> dict[str, Any]:
    """This rank's shard: its model parameters (with LoRA, `trainable_only`: the adapters; the
    frozen base is the model at model.path), its optimizer state, the step counter.

    Resuming needs the same TP/PP/DP layout (the trainer loop saves one file per rank).
    On GPU the distributed optimizer's fp32 main params and Adam moments come from its
    DP-sharded ("dp_reshardable") state; that path is not exercised on CPU.
    """
    opt: dict[str, Any] = {"state_dict": to_cpu(optimizer.state_dict())}
    if layout.cuda:
        opt["param_state"] = [to_cpu(o.get_parameter_state_dp_reshardable())
                              if hasattr(o, "get_parameter_state_dp_reshardable") else None
                              for o in _optimizer_parts(optimizer)]
    params = {n: p for n, p in model.named_parameters() if p.requires_grad} if trainable_only else model.state_dict()
    return {"model": {k: v.detach().cpu().clone() for k, v in params.items() if isinstance(v, Tensor)},
            "optimizer": opt, "optimizer_steps": optimizer_steps, "layout": layout_key(layout)}


def load_rank_state(model, optimizer, layout: ParallelLayout, state: dict[str, Any],
                    trainable_only: bool = False) -> int:
    """Restore what `rank_state` returned; returns the saved optimizer step counter."""
    if state["layout"] != layout_key(layout):
        raise ValueError(f"checkpoint was saved with layout {state['layout']}, this run has {layout_key(layout)}")
    missing, unexpected = model.load_state_dict(state["model"], strict=False)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    missing = [k for k in missing if not k.endswith("_extra_state") and (not trainable_only or k in trainable)]
    if missing or unexpected:
        raise ValueError(f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
    optimizer.load_state_dict(state["optimizer"]["state_dict"])
    if layout.cuda:
        for o, param_state in zip(_optimizer_parts(optimizer), state["optimizer"]["param_state"]):
            if param_state is not None:
                o.load_parameter_state_from_dp_reshardable(param_state)
    return int(state["optimizer_steps"])


def to_cpu(obj: Any) -> Any:
    """Deep copy with every tensor moved to CPU (checkpoints must not hold CUDA tensors)."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(to_cpu(v) for v in obj)
    return obj
