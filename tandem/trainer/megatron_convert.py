"""HF <-> Megatron-core weight conversion for the Llama / Qwen2 / Qwen3 / Qwen3-MoE family, with TP sharding.

Why our own: mbridge only converts on CPU with patches and megatron-bridge does not install
on this stack, while the mapping for this family is small and fully checkable. Every rule
below is a pure permutation / concatenation / slice of the HF tensors, so HF -> Megatron
shards -> HF is bitwise identical (tests/test_megatron_cpu.py checks exactly that).

Megatron layout facts this relies on (megatron-core 0.16, local spec, no Transformer Engine):
- `self_attention.linear_qkv` fuses Q, K and V per query group ("interleaved"): for each of
  the `ng` KV heads, the rows of its `np/ng` query heads, then its K head, then its V head.
  Column parallelism gives TP rank r the r-th contiguous chunk of those rows, which is a
  whole number of groups because we require ng % tp == 0.
- `mlp.linear_fc1` with a gated linear unit holds [gate; up] *per TP rank*: rank r holds
  cat(gate_r, up_r), and the activation splits its local output in two halves.
- `linear_proj` and `linear_fc2` are row parallel (split along the input dim); norms are
  replicated; `embedding.word_embeddings` and `output_layer` are vocab parallel (split
  along rows), padded with zero rows to a multiple of `vocab_multiple * tp`. The padding
  never reaches HF: export drops it, and the trainer masks padded logits out.
- Layer names are local to a pipeline stage (`decoder.layers.{i}`); callers pass the
  global layer index, which is `layer_number - 1` of the Megatron layer.
- Mixture of experts (megatron-core's local MoE layer: SequentialMLP experts, no grouped GEMM):
  `mlp.router.weight` [E, hidden] is HF's `mlp.gate.weight`; expert e's `linear_fc1` is
  [gate_e; up_e] like the dense MLP's and its `linear_fc2` is `down_proj` (HF checkpoints keep one
  module per expert: `mlp.experts.{e}.gate_proj.weight`, ...). Megatron names an expert by its
  index on its expert-parallel rank (`mlp.experts.local_experts.{j}`); here names carry the
  global index e = ep_rank x E / EP + j (`experts_of_rank`, `with_expert`), like layers carry
  the global layer index. Which layers are MoE follows HF's Qwen3-MoE rule (`moe_layers`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterable

import torch
from torch import Tensor

# Names with global layer and expert indices, re-exported: callers reach them through this module.
from tandem.trainer.megatron_names import (experts_of_rank, expert_index, layer_name, moe_layers,  # noqa: F401
                                           split_layer_name, with_expert)

SUPPORTED_ARCHS = {
    "Qwen3ForCausalLM": "qwen3",
    "Qwen3MoeForCausalLM": "qwen3_moe",
    "Qwen2ForCausalLM": "qwen2",
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "llama",
}


class ConversionError(ValueError):
    """The HF model cannot be mapped onto Megatron's GPTModel by this converter."""


@dataclass(frozen=True)
class ModelShape:
    """What the converter and the Megatron model builder need to know about an HF model."""

    arch: str
    num_layers: int
    hidden_size: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    ffn_hidden_size: int
    vocab_size: int
    padded_vocab_size: int
    qk_norm: bool
    qkv_bias: bool
    tie_embeddings: bool
    rms_eps: float
    rope_theta: float
    max_position_embeddings: int
    num_experts: int = 0
    """Routed experts per MoE layer; 0: a dense model."""
    moe_top_k: int = 0
    moe_ffn_hidden_size: int = 0
    moe_layers: tuple[int, ...] = ()
    """The layers whose MLP is a mixture of experts (HF's Qwen3-MoE rule, `moe_layers`)."""
    norm_topk_prob: bool = False
    """The top-k gates are renormalised to sum to 1 (Qwen3-MoE's norm_topk_prob)."""

    @property
    def heads_per_group(self) -> int:
        return self.num_heads // self.num_kv_heads


def _rope_theta(hf: dict) -> float:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    rope_type = params.get("rope_type") or scaling.get("rope_type") or scaling.get("type") or "default"
    if rope_type != "default":
        # Megatron's GPTModel has its own (Llama-3.1-only) scaling switch; mapping the HF
        # variants onto it is not verified, and a silent mismatch would train a different model.
        raise ConversionError(f"rope type {rope_type!r} is not supported by the Megatron converter (only 'default')")
    theta = params.get("rope_theta", hf.get("rope_theta"))
    if theta is None:
        raise ConversionError("HF config has no rope_theta")
    return float(theta)


def padded_vocab(vocab_size: int, tp: int, multiple: int = 128) -> int:
    """Megatron-LM's rule: round the vocab up to a multiple of `multiple * tp`."""
    step = multiple * tp
    return int(math.ceil(vocab_size / step) * step)


def shape_from_hf_config(hf: dict, tp: int = 1, vocab_multiple: int = 128, ep: int = 1) -> ModelShape:
    """Read an HF config.json dict; refuse what the mapping does not cover rather than guess."""
    archs = hf.get("architectures") or []
    arch = next((SUPPORTED_ARCHS[a] for a in archs if a in SUPPORTED_ARCHS), None)
    if arch is None:
        raise ConversionError(f"architecture {archs} is not supported by the Megatron converter "
                              f"(supported: {sorted(SUPPORTED_ARCHS)})")
    if hf.get("hidden_act", "silu") != "silu":
        raise ConversionError(f"hidden_act {hf.get('hidden_act')!r} is not supported (only silu)")
    if arch == "llama" and (hf.get("attention_bias") or hf.get("mlp_bias")):
        raise ConversionError("Llama attention_bias / mlp_bias is not supported by the Megatron converter")
    if arch.startswith("qwen3") and hf.get("attention_bias"):
        raise ConversionError("Qwen3 attention_bias is not supported by the Megatron converter")
    if hf.get("use_sliding_window"):
        raise ConversionError("sliding-window attention is not supported by the Megatron backend")
    heads = int(hf["num_attention_heads"])
    kv = int(hf.get("num_key_value_heads") or heads)
    hidden = int(hf["hidden_size"])
    head_dim = int(hf.get("head_dim") or hidden // heads)
    if heads % kv:
        raise ConversionError(f"num_attention_heads {heads} is not a multiple of num_key_value_heads {kv}")
    if heads % tp:
        raise ConversionError(f"tensor_parallel {tp} does not divide num_attention_heads {heads}")
    if kv % tp:
        # Megatron 0.16 can split one KV head across ranks (it all-gathers QKV), but its
        # attention kernels then need divide(kv, tp); keep to the layout that is tested.
        raise ConversionError(f"tensor_parallel {tp} does not divide num_key_value_heads {kv}")
    ffn = int(hf["intermediate_size"])
    if ffn % tp:
        raise ConversionError(f"tensor_parallel {tp} does not divide intermediate_size {ffn}")
    vocab = int(hf["vocab_size"])
    moe = _moe_fields(hf, int(hf["num_hidden_layers"]), tp, ep) if arch == "qwen3_moe" else {}
    if ep > 1 and not moe.get("moe_layers"):
        raise ConversionError(f"trainer.megatron.expert_parallel = {ep} with a dense model: expert parallelism "
                              "splits the experts of a mixture-of-experts model; set it to 1")
    return ModelShape(
        arch=arch, num_layers=int(hf["num_hidden_layers"]), hidden_size=hidden, num_heads=heads,
        num_kv_heads=kv, head_dim=head_dim, ffn_hidden_size=ffn, vocab_size=vocab,
        padded_vocab_size=padded_vocab(vocab, tp, vocab_multiple), qk_norm=arch.startswith("qwen3"),
        qkv_bias=arch == "qwen2",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)), rms_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=_rope_theta(hf), max_position_embeddings=int(hf.get("max_position_embeddings", 4096)), **moe,
    )


def _moe_fields(hf: dict, num_layers: int, tp: int, ep: int) -> dict:
    # Hub configs say num_experts; transformers 5's save_pretrained writes its alias num_local_experts.
    experts = int(hf.get("num_experts") or hf.get("num_local_experts") or 0)
    if hf.get("shared_expert_intermediate_size"):
        raise ConversionError("shared experts are not supported by the Megatron converter (Qwen3-MoE has none)")
    if tp > 1 and experts:
        # MoELayer refuses to train with TP > 1 without sequence parallelism, which tandem's Megatron path does
        # not use; expert parallelism is how a mixture of experts is split here.
        raise ConversionError(f"trainer.megatron.tensor_parallel = {tp} with a mixture-of-experts model: megatron-core "
                              "0.16.1 trains MoE layers at TP > 1 only with sequence parallelism, which tandem does "
                              "not use; set tensor_parallel = 1 and split the experts with expert_parallel")
    if experts % ep:
        raise ConversionError(f"trainer.megatron.expert_parallel = {ep} does not divide the model's {experts} experts")
    layers = moe_layers(num_layers, experts, int(hf.get("decoder_sparse_step", 1)), hf.get("mlp_only_layers") or [])
    return {"num_experts": experts, "moe_top_k": int(hf["num_experts_per_tok"]),
            "moe_ffn_hidden_size": int(hf["moe_intermediate_size"]), "moe_layers": layers,
            "norm_topk_prob": bool(hf.get("norm_topk_prob", False))}


# --------------------------------------------------------------------------- names
def megatron_param_names(shape: ModelShape, layers: Iterable[int] | None = None,
                         pre_process: bool = True, post_process: bool = True,
                         experts: Iterable[int] | None = None) -> list[str]:
    """Megatron parameter names (global layer and expert indices) a stage holding `layers` and, in its
    MoE layers, `experts` (all of them by default) owns."""
    names = ["embedding.word_embeddings.weight"] if pre_process else []
    held = list(range(shape.num_experts) if experts is None else experts)
    for i in (range(shape.num_layers) if layers is None else layers):
        names += [layer_name(i, r) for r in _layer_params(shape, i, held)]
    if post_process:
        names.append("decoder.final_layernorm.weight")
        # Tied and on one stage, Megatron's output layer reads the embedding; on a separate
        # last pipeline stage it keeps its own copy (kept equal by the embedding group).
        if not shape.tie_embeddings or not pre_process:
            names.append("output_layer.weight")
    return names


def _layer_params(shape: ModelShape, layer: int, experts: list[int]) -> list[str]:
    rest = ["input_layernorm.weight", "self_attention.linear_qkv.weight", "self_attention.linear_proj.weight",
            "pre_mlp_layernorm.weight"]
    if layer in shape.moe_layers:
        rest += ["mlp.router.weight"] + [f"mlp.experts.local_experts.{e}.{fc}.weight"
                                         for e in experts for fc in ("linear_fc1", "linear_fc2")]
    else:
        rest += ["mlp.linear_fc1.weight", "mlp.linear_fc2.weight"]
    if shape.qkv_bias:
        rest.append("self_attention.linear_qkv.bias")
    if shape.qk_norm:
        rest += ["self_attention.q_layernorm.weight", "self_attention.k_layernorm.weight"]
    return rest


_SIMPLE_LAYER = {
    "input_layernorm.weight": "input_layernorm.weight",
    "pre_mlp_layernorm.weight": "post_attention_layernorm.weight",
    "self_attention.linear_proj.weight": "self_attn.o_proj.weight",
    "self_attention.q_layernorm.weight": "self_attn.q_norm.weight",
    "self_attention.k_layernorm.weight": "self_attn.k_norm.weight",
    "mlp.linear_fc2.weight": "mlp.down_proj.weight",
    "mlp.router.weight": "mlp.gate.weight",
}


def hf_names_for(mg_name: str) -> list[str]:
    """The HF tensors one Megatron parameter is built from (in fusion order)."""
    layer, rest = split_layer_name(mg_name)
    if layer is None:
        return {"embedding.word_embeddings.weight": ["model.embed_tokens.weight"],
                "decoder.final_layernorm.weight": ["model.norm.weight"],
                "output_layer.weight": ["lm_head.weight"]}[rest]
    p = f"model.layers.{layer}."
    if rest in _SIMPLE_LAYER:
        return [p + _SIMPLE_LAYER[rest]]
    if rest == "self_attention.linear_qkv.weight":
        return [p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"]
    if rest == "self_attention.linear_qkv.bias":
        return [p + "self_attn.q_proj.bias", p + "self_attn.k_proj.bias", p + "self_attn.v_proj.bias"]
    if rest == "mlp.linear_fc1.weight":
        return [p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"]
    expert = expert_index(mg_name)
    if expert is not None and rest.endswith(".linear_fc1.weight"):
        return [p + f"mlp.experts.{expert}.gate_proj.weight", p + f"mlp.experts.{expert}.up_proj.weight"]
    if expert is not None and rest.endswith(".linear_fc2.weight"):
        return [p + f"mlp.experts.{expert}.down_proj.weight"]
    raise ConversionError(f"no HF mapping for Megatron parameter {mg_name!r}")


# --------------------------------------------------------------------------- fusion (full, TP=1)
def _fuse_qkv(q: Tensor, k: Tensor, v: Tensor, shape: ModelShape) -> Tensor:
    """[q; k; v] in HF order -> Megatron's per-group [q_g..., k_g, v_g] rows (works for bias too)."""
    ng, hpg, hd = shape.num_kv_heads, shape.heads_per_group, shape.head_dim
    tail = q.shape[1:]
    qg = q.reshape(ng, hpg * hd, *tail)
    kg = k.reshape(ng, hd, *tail)
    vg = v.reshape(ng, hd, *tail)
    return torch.cat([qg, kg, vg], dim=1).reshape(ng * (hpg + 2) * hd, *tail)


def _unfuse_qkv(qkv: Tensor, shape: ModelShape) -> tuple[Tensor, Tensor, Tensor]:
    ng, hpg, hd = shape.num_kv_heads, shape.heads_per_group, shape.head_dim
    tail = qkv.shape[1:]
    grouped = qkv.reshape(ng, (hpg + 2) * hd, *tail)
    q, k, v = torch.split(grouped, [hpg * hd, hd, hd], dim=1)
    return (q.reshape(ng * hpg * hd, *tail).contiguous(), k.reshape(ng * hd, *tail).contiguous(),
            v.reshape(ng * hd, *tail).contiguous())


def pad_vocab_rows(w: Tensor, shape: ModelShape) -> Tensor:
    """Rows of a vocabulary-sized tensor, padded with zero rows to the padded vocabulary."""
    extra = shape.padded_vocab_size - w.shape[0]
    if extra < 0:
        raise ConversionError(f"embedding has {w.shape[0]} rows, more than the padded vocab {shape.padded_vocab_size}")
    return torch.cat([w, w.new_zeros(extra, *w.shape[1:])]) if extra else w


def hf_to_megatron_full(mg_name: str, hf: Callable[[str], Tensor], shape: ModelShape) -> Tensor:
    """The unsharded (TP=1) Megatron tensor `mg_name`, built from HF tensors fetched by name."""
    layer, rest = split_layer_name(mg_name)
    if rest in ("embedding.word_embeddings.weight", "output_layer.weight"):
        src = hf("model.embed_tokens.weight") if rest == "output_layer.weight" and shape.tie_embeddings \
            else hf(hf_names_for(mg_name)[0])
        return pad_vocab_rows(src, shape)
    parts = [hf(n) for n in hf_names_for(mg_name)]
    if rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
        q, k, v = parts
        return _fuse_qkv(q, k, v, shape)
    if rest.endswith("linear_fc1.weight"):  # the dense MLP's or an expert's: [gate; up]
        return torch.cat(parts, dim=0)
    return parts[0]


def megatron_full_to_hf(mg_name: str, full: Tensor, shape: ModelShape) -> dict[str, Tensor]:
    """Inverse of `hf_to_megatron_full`: HF-named tensors from one unsharded Megatron tensor."""
    layer, rest = split_layer_name(mg_name)
    names = hf_names_for(mg_name)
    if rest in ("embedding.word_embeddings.weight", "output_layer.weight"):
        return {names[0]: full[: shape.vocab_size].contiguous()}
    if rest in ("self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
        return dict(zip(names, _unfuse_qkv(full, shape)))
    if rest.endswith("linear_fc1.weight"):
        gate, up = torch.chunk(full, 2, dim=0)
        return {names[0]: gate.contiguous(), names[1]: up.contiguous()}
    return {names[0]: full.contiguous()}


# --------------------------------------------------------------------------- TP sharding
def tp_split_kind(mg_name: str) -> str:
    """How a parameter is partitioned across TP ranks: 'rows', 'cols', 'glu_rows' or 'replicated'."""
    _, rest = split_layer_name(mg_name)
    if rest in ("embedding.word_embeddings.weight", "output_layer.weight",
                "self_attention.linear_qkv.weight", "self_attention.linear_qkv.bias"):
        return "rows"
    if rest.endswith("linear_fc1.weight"):  # an expert's too (expert tensor parallelism splits it alike)
        return "glu_rows"
    if rest == "self_attention.linear_proj.weight" or rest.endswith("linear_fc2.weight"):
        return "cols"
    return "replicated"


def shard(mg_name: str, full: Tensor, tp_rank: int, tp_size: int) -> Tensor:
    """TP rank `tp_rank`'s piece of an unsharded Megatron tensor."""
    kind = tp_split_kind(mg_name)
    if tp_size == 1 or kind == "replicated":
        return full
    if kind == "rows":
        return torch.chunk(full, tp_size, dim=0)[tp_rank].contiguous()
    if kind == "cols":
        return torch.chunk(full, tp_size, dim=1)[tp_rank].contiguous()
    gate, up = torch.chunk(full, 2, dim=0)
    return torch.cat([torch.chunk(gate, tp_size, 0)[tp_rank], torch.chunk(up, tp_size, 0)[tp_rank]]).contiguous()


def unshard(mg_name: str, shards: list[Tensor]) -> Tensor:
    """Inverse of `shard`: the full tensor from every TP rank's piece, in rank order."""
    kind = tp_split_kind(mg_name)
    if len(shards) == 1 or kind == "replicated":
        return shards[0]
    if kind == "rows":
        return torch.cat(shards, dim=0)
    if kind == "cols":
        return torch.cat(shards, dim=1)
    halves = [torch.chunk(s, 2, dim=0) for s in shards]
    return torch.cat([h[0] for h in halves] + [h[1] for h in halves], dim=0)


def hf_to_megatron_shard(mg_name: str, hf: Callable[[str], Tensor], shape: ModelShape,
                         tp_rank: int, tp_size: int) -> Tensor:
    return shard(mg_name, hf_to_megatron_full(mg_name, hf, shape), tp_rank, tp_size)


# --------------------------------------------------------------------------- whole dicts (tests, tiny models)
def hf_to_megatron_state_dicts(hf_sd: dict[str, Tensor], shape: ModelShape, tp_size: int = 1,
                               pp_layers: list[range] | None = None) -> list[list[dict[str, Tensor]]]:
    """Whole-model conversion: [pp_stage][tp_rank] -> state dict with *local* layer names.

    Meant for tests and small models; the trainer converts parameter by parameter instead.
    """
    stages = pp_layers or [range(shape.num_layers)]
    out = []
    for s, layers in enumerate(stages):
        names = megatron_param_names(shape, layers, pre_process=s == 0, post_process=s == len(stages) - 1)
        per_rank = []
        for r in range(tp_size):
            sd = {}
            for n in names:
                layer, rest = split_layer_name(n)
                local = n if layer is None else layer_name(layer - layers.start, rest)
                sd[local] = hf_to_megatron_shard(n, hf_sd.__getitem__, shape, r, tp_size)
            per_rank.append(sd)
        out.append(per_rank)
    return out


def megatron_state_dicts_to_hf(stage_dicts: list[list[dict[str, Tensor]]], shape: ModelShape,
                               pp_layers: list[range] | None = None) -> dict[str, Tensor]:
    """Inverse of `hf_to_megatron_state_dicts`. Tied models get no lm_head.weight (HF re-ties it)."""
    stages = pp_layers or [range(shape.num_layers)]
    hf: dict[str, Tensor] = {}
    for s, (layers, per_rank) in enumerate(zip(stages, stage_dicts)):
        for local in per_rank[0]:
            layer, rest = split_layer_name(local)
            if layer is None and rest == "output_layer.weight" and shape.tie_embeddings:
                continue  # the last stage's copy of the tied embedding
            name = local if layer is None else layer_name(layers.start + layer, rest)
            hf.update(megatron_full_to_hf(name, unshard(name, [sd[local] for sd in per_rank]), shape))
    return hf
