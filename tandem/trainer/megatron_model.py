"""Model building for the Megatron backend: a GPTModel for the Llama/Qwen family, loaded from HF.

A mixture-of-experts model (Qwen3-MoE) gets megatron-core's local MoE layers in the layers HF
makes MoE: a top-k softmax router (fp32 logits, no load-balancing loss: the HF model trains
without one too), SequentialMLP experts and the all-to-all token dispatcher over the
expert-parallel group.

Attention is torch SDPA (flash / memory-efficient kernels on GPU) wrapped as Megatron's
core attention, because megatron-core's local attention materializes the full [s, s]
score matrix and Transformer Engine is not part of this stack. Weights come from the HF
safetensors through `megatron_convert` (every Megatron parameter must have an HF source).
`build_optimizer` wraps the model for training: on CUDA megatron.core's
DistributedDataParallel, distributed optimizer and bf16 (Float16Module, fp32 main
params), with trainer.megatron's memory features (HybridDeviceOptimizer CPU offload, the
precision-aware optimizer, bf16 main grads) passed to its OptimizerConfig and DDP config;
without CUDA the CPU shim's AdamW (or HybridDeviceOptimizer) over the same parameter groups.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from tandem.config import TrainerConfig
from tandem.trainer import megatron_convert as conv
from tandem.trainer import megatron_cpu_shim as shim
from tandem.trainer.megatron_dist import ParallelLayout


def _sdpa_core_attention_cls():
    """Megatron core attention that runs torch SDPA (causal), a drop-in for DotProductAttention."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class SDPACoreAttention(DotProductAttention):
        """Inputs [s, b, heads, d] as Megatron passes them; output [s, b, heads_per_partition * d].

        Causality comes from `is_causal`: padded batches are right-padded, so padding only
        ever follows the real tokens and a causal mask is the whole mask. A packed row
        (PackedSeqParams, 'thd': inputs [t, heads, d]) is attended one sample at a time between
        its cu_seqlens: block-diagonal causal attention without a [t, t] mask.
        """

        def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                    packed_seq_params=None):
            if attention_bias is not None:
                raise NotImplementedError("SDPA core attention supports plain causal attention only")
            if packed_seq_params is not None:
                if packed_seq_params.qkv_format != "thd":
                    raise NotImplementedError("packed sequences must come in megatron-core's 'thd' format")
                bounds = packed_seq_params.cu_seqlens_q.tolist()
                lengths = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
                # split, not slices: its backward concatenates the samples' gradients once, where every
                # slice's backward would fill a zero tensor of the whole row
                parts = [self._causal(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1))
                         for q, k, v in zip(*(t.split(lengths) for t in (query, key, value)))]
                return torch.cat(parts)[:, 0]
            return self._causal(query, key, value)

        def _causal(self, query, key, value):
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, h, s, d]
            rep = q.shape[1] // k.shape[1]
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
            s, b = out.shape[2], out.shape[0]
            return out.permute(2, 0, 1, 3).reshape(s, b, self.hidden_size_per_partition)

    return SDPACoreAttention


def _moe_settings(shape: conv.ModelShape, ep: int) -> dict[str, Any]:
    """TransformerConfig's MoE keys for `shape` (none for a dense model)."""
    if not shape.moe_layers:
        return {}
    _router_without_transformer_engine()
    return dict(
        num_moe_experts=shape.num_experts, moe_router_topk=shape.moe_top_k, moe_ffn_hidden_size=shape.moe_ffn_hidden_size,
        moe_layer_freq=[int(i in shape.moe_layers) for i in range(shape.num_layers)], expert_model_parallel_size=ep,
        # HF's router: softmax over every expert, top-k, renormalised by norm_topk_prob. megatron-core's top-k of the
        # logits then a softmax over the k is the renormalised form; pre-softmax is the other.
        moe_router_pre_softmax=not shape.norm_topk_prob, moe_router_score_function="softmax",
        moe_router_load_balancing_type="none", moe_aux_loss_coeff=0.0, moe_router_dtype="fp32",
        moe_grouped_gemm=False, moe_permute_fusion=False, moe_router_fusion=False)


def _router_without_transformer_engine() -> None:
    """megatron-core 0.16.1's router linear reads `te_general_gemm`, a name it defines only when Transformer
    Engine imports (NameError otherwise, on CPU and GPU alike); without TE its own torch.mm path is meant."""
    from megatron.core.transformer.moe import moe_utils

    if not moe_utils.HAVE_TE and not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def transformer_config(shape: conv.ModelShape, tp: int, pp: int, *, bf16: bool, cpu: bool, recompute: bool,
                       ep: int = 1):
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if bf16 else torch.float32
    kw: dict[str, Any] = _moe_settings(shape, ep)
    if recompute:
        kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    return TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size, num_attention_heads=shape.num_heads,
        num_query_groups=shape.num_kv_heads, kv_channels=shape.head_dim, ffn_hidden_size=shape.ffn_hidden_size,
        gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm", layernorm_epsilon=shape.rms_eps,
        add_bias_linear=False, add_qkv_bias=shape.qkv_bias, qk_layernorm=shape.qk_norm,
        hidden_dropout=0.0, attention_dropout=0.0,  # the trainer must score tokens like the engines
        bias_dropout_fusion=False, apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        # perform_initialization must stay on even though HF weights overwrite the values: it is
        # also what tags TP-sharded params (tensor_model_parallel, partition_dim), which grad
        # norms, the distributed optimizer and our loader check rely on.
        gradient_accumulation_fusion=False, use_cpu_initialization=cpu, perform_initialization=True,
        params_dtype=torch.float32, bf16=bf16, pipeline_dtype=dtype, autocast_dtype=dtype,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, sequence_parallel=False,
        # Micro-batches differ in length: the pipeline schedule must send shapes along.
        variable_seq_lengths=True, moe_token_dispatcher_type="alltoall", **kw,
    )


def build_gpt_model(shape: conv.ModelShape, tconfig, pre_process: bool, post_process: bool):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec, get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    if shape.moe_layers:  # a spec per layer of this stage, MoE or dense by tconfig.moe_layer_freq
        spec = get_gpt_decoder_block_spec(tconfig, use_transformer_engine=False, normalization="RMSNorm")
        layer_specs = spec.layer_specs
    else:
        spec = get_gpt_layer_local_spec(qk_layernorm=shape.qk_norm, normalization="RMSNorm")
        layer_specs = [spec]
    for layer_spec in layer_specs:
        layer_spec.submodules.self_attention.submodules.core_attention = _sdpa_core_attention_cls()
    return GPTModel(
        tconfig, spec, vocab_size=shape.padded_vocab_size, max_sequence_length=shape.max_position_embeddings,
        pre_process=pre_process, post_process=post_process,
        share_embeddings_and_output_weights=shape.tie_embeddings, position_embedding_type="rope",
        rotary_percent=1.0, rotary_base=shape.rope_theta,
    )


def layer_offset(model) -> int:
    """Global index of this stage's first layer (Megatron's layer_number is global and 1-based)."""
    layers = model.decoder.layers
    return layers[0].layer_number - 1 if len(layers) else 0


def global_name(local: str, offset: int, first_expert: int = 0) -> str:
    """A parameter's name with global layer and expert indices (this stage's first layer is `offset`, this
    expert-parallel rank's first expert `first_expert`)."""
    layer, rest = conv.split_layer_name(local)
    name = local if layer is None else conv.layer_name(layer + offset, rest)
    expert = conv.expert_index(name)
    return name if expert is None else conv.with_expert(name, expert + first_expert)


class HFReader:
    """Lazy, name-addressed reads from an HF safetensors checkpoint (single file or sharded)."""

    def __init__(self, model_dir: str | os.PathLike):
        from safetensors import safe_open

        root = Path(model_dir)
        index = root / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
        elif (root / "model.safetensors").exists():
            weight_map = None
        else:
            raise FileNotFoundError(f"{root}: no model.safetensors(.index.json); the Megatron backend loads HF safetensors")
        self._handles: dict[str, Any] = {}
        self._open = lambda f: self._handles.setdefault(f, safe_open(str(root / f), framework="pt"))
        self._map = weight_map
        self.names = set(weight_map) if weight_map else set(self._open("model.safetensors").keys())

    def __call__(self, name: str) -> Tensor:
        if name not in self.names:
            raise KeyError(f"HF checkpoint has no tensor {name!r}")
        return self._open(self._map[name] if self._map else "model.safetensors").get_tensor(name)


@torch.no_grad()
def load_hf_into(model, reader: Callable[[str], Tensor], shape: conv.ModelShape, layout: ParallelLayout) -> None:
    """Copy HF weights into this rank's (unwrapped) GPTModel; every parameter must be covered."""
    tp_rank, tp = layout.tp_rank, layout.tp
    offset = layer_offset(model)
    experts = conv.experts_of_rank(shape.num_experts, layout.ep, layout.ep_rank)
    expected = set(conv.megatron_param_names(shape, range(offset, offset + len(model.decoder.layers)),
                                             model.pre_process, model.post_process, experts))
    seen = set()
    for local, param in model.named_parameters():
        name = global_name(local, offset, experts.start)
        if name not in expected:
            raise conv.ConversionError(f"Megatron parameter {name!r} has no HF source in the converter")
        kind = conv.tp_split_kind(name)
        tagged = getattr(param, "tensor_model_parallel", False)
        if tp > 1 and (tagged != (kind != "replicated") or
                       (tagged and param.partition_dim != (1 if kind == "cols" else 0))):
            raise conv.ConversionError(f"{name}: the converter splits it as {kind!r} but Megatron's parameter is "
                                       f"tagged tensor_model_parallel={tagged}, "
                                       f"partition_dim={getattr(param, 'partition_dim', None)}")
        value = conv.hf_to_megatron_shard(name, reader, shape, tp_rank, tp)
        if tuple(value.shape) != tuple(param.shape):
            raise conv.ConversionError(f"{name}: HF gives shape {tuple(value.shape)}, Megatron expects {tuple(param.shape)}")
        param.copy_(value.to(param.dtype))
        seen.add(name)
    if seen != expected:
        raise conv.ConversionError(f"Megatron parameters not loaded: {sorted(expected - seen)}")


def build_and_load(shape: conv.ModelShape, tconfig, layout: ParallelLayout, reader: HFReader):
    """This rank's stage of the GPTModel (unwrapped), with its HF weights."""
    model = build_gpt_model(shape, tconfig, layout.first_stage, layout.last_stage)
    if layout.cuda:
        model = model.cuda()
    load_hf_into(model, reader, shape, layout)
    # Train mode like Megatron-LM (recompute only runs in train mode); dropout is 0, so the
    # scores equal eval mode's. A frozen reference model is switched to eval() by its caller.
    model.train()
    return model


def wrap_precision(model, tconfig, bf16: bool):
    if not bf16:
        return model
    from megatron.core.transformer.module import Float16Module

    return Float16Module(tconfig, model)  # bf16 compute, fp32 logits out of the last stage


def build_reference(shape: conv.ModelShape, tconfig, layout: ParallelLayout, reader: HFReader, bf16: bool):
    """The frozen reference policy of the KL penalty: the source weights, no grads, eval mode."""
    ref = build_and_load(shape, tconfig, layout, reader)
    ref.requires_grad_(False).eval()
    return wrap_precision(ref, tconfig, bf16)


def build_optimizer(tc: TrainerConfig, model, tconfig, layout: ParallelLayout, bf16: bool):
    """(the model to run forward/backward on, its optimizer), per device (module docstring)."""
    mcfg = tc.megatron
    if not layout.cuda:
        offload = (mcfg.optimizer_offload_fraction, mcfg.overlap_cpu_optimizer_d2h_h2d) \
            if mcfg.optimizer_cpu_offload else None
        optimizer = shim.CpuAdamW(model.named_parameters(), lr=tc.lr, betas=tuple(tc.betas),
                                  weight_decay=tc.weight_decay, clip_grad=tc.grad_clip, offload=offload)
        return model, optimizer
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

    ddp_config = DistributedDataParallelConfig(
        grad_reduce_in_fp32=mcfg.main_grads_dtype == "float32", overlap_grad_reduce=False,
        overlap_param_gather=False, use_distributed_optimizer=mcfg.use_distributed_optimizer)
    train_model = DistributedDataParallel(tconfig, ddp_config, wrap_precision(model, tconfig, bf16))
    # clip_grad = 0 makes Megatron skip the norm; a huge bound keeps the metric without clipping.
    clip = tc.grad_clip if tc.grad_clip > 0 else 1e30
    opt_config = OptimizerConfig(
        optimizer="adam", lr=tc.lr, min_lr=tc.lr, weight_decay=tc.weight_decay, adam_beta1=tc.betas[0],
        adam_beta2=tc.betas[1], adam_eps=1e-8, clip_grad=clip, bf16=bf16,
        params_dtype=torch.bfloat16 if bf16 else torch.float32,
        use_distributed_optimizer=mcfg.use_distributed_optimizer,
        # Memory features (trainer.megatron; the config refuses what this stack cannot run).
        optimizer_cpu_offload=mcfg.optimizer_cpu_offload, optimizer_offload_fraction=mcfg.optimizer_offload_fraction,
        overlap_cpu_optimizer_d2h_h2d=mcfg.overlap_cpu_optimizer_d2h_h2d,
        use_precision_aware_optimizer=mcfg.precision_aware_optimizer, main_grads_dtype=getattr(torch, mcfg.main_grads_dtype))
    optimizer = get_megatron_optimizer(opt_config, [train_model])
    # Megatron keeps biases and 1-D params out of weight decay through per-group wd_mult,
    # which Megatron-LM's LR scheduler applies each step. tandem has a constant LR and no
    # scheduler, so apply the multipliers once here (the CPU shim builds the same groups).
    for group in optimizer.param_groups:
        group["weight_decay"] = tc.weight_decay * group.get("wd_mult", 1.0)
        group["lr"] = tc.lr * group.get("lr_mult", 1.0)
    return train_model, optimizer
