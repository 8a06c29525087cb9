"""The HF <-> Megatron weight converter (tandem/trainer/megatron_convert.py): torch only.

It needs no megatron-core, so these tests run on every install (the backend tests in
test_megatron_cpu.py skip without megatron-core). Round trip HF -> Megatron shards -> HF
is bitwise for every layout: TP 1-4, PP 1-2, tied and untied embeddings, GQA and MHA.
"""

from __future__ import annotations

import pytest
import torch

from tandem.trainer import megatron_convert as conv


def _tiny_hf(arch: str, tie: bool, heads=4, kv=2, layers=2):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cls_cfg, cls = {"qwen3": (Qwen3Config, Qwen3ForCausalLM), "qwen2": (Qwen2Config, Qwen2ForCausalLM),
                    "llama": (LlamaConfig, LlamaForCausalLM)}[arch]
    cfg = cls_cfg(vocab_size=259, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
                  num_attention_heads=heads, num_key_value_heads=kv, head_dim=16, tie_word_embeddings=tie,
                  max_position_embeddings=128)
    torch.manual_seed(0)
    model = cls(cfg)
    with torch.no_grad():  # random non-trivial norms/biases so a swapped tensor cannot hide
        for n, p in model.named_parameters():
            if p.dim() == 1:
                p.normal_()
    return model


@pytest.mark.parametrize("arch,tie,heads,kv,tp,pp", [
    ("qwen3", True, 4, 2, 1, 1), ("qwen3", True, 4, 2, 2, 1), ("qwen3", True, 4, 2, 2, 2),
    ("qwen2", False, 4, 2, 2, 1), ("llama", False, 4, 4, 4, 2), ("llama", True, 8, 2, 2, 1),
])
def test_converter_round_trip_is_bitwise(arch, tie, heads, kv, tp, pp):
    model = _tiny_hf(arch, tie, heads, kv)
    hf_sd = {k: v for k, v in model.state_dict().items() if not (tie and k == "lm_head.weight")}
    shape = conv.shape_from_hf_config(model.config.to_dict() | {"architectures": [type(model).__name__]}, tp)
    per = shape.num_layers // pp
    stages = [range(s * per, (s + 1) * per) for s in range(pp)]
    shards = conv.hf_to_megatron_state_dicts(hf_sd, shape, tp, stages)
    back = conv.megatron_state_dicts_to_hf(shards, shape, stages)
    assert set(back) == set(hf_sd)
    for k, v in hf_sd.items():
        assert torch.equal(back[k], v), k
    # Shards really are partitions (no rank holds the whole QKV / fc1 / proj).
    qkv = shards[0][0]["decoder.layers.0.self_attention.linear_qkv.weight"]
    assert qkv.shape[0] == (heads + 2 * kv) * 16 // tp
    assert shards[-1][0]["decoder.final_layernorm.weight"].shape == (64,)


def test_qkv_fusion_is_megatrons_per_group_layout():
    """Megatron splits each group's rows as [q heads of the group, k, v]: check against HF head order."""
    model = _tiny_hf("qwen3", True)
    sd = model.state_dict()
    shape = conv.shape_from_hf_config(model.config.to_dict() | {"architectures": ["Qwen3ForCausalLM"]}, 1)
    fused = conv.hf_to_megatron_full("decoder.layers.1.self_attention.linear_qkv.weight", sd.__getitem__, shape)
    q, k, v = (sd[f"model.layers.1.self_attn.{n}_proj.weight"] for n in "qkv")
    group1 = fused.reshape(2, 4 * 16, 64)[1]  # 2 query heads + k + v, 16 rows each
    assert torch.equal(group1[:32], q[32:64]) and torch.equal(group1[32:48], k[16:32])
    assert torch.equal(group1[48:], v[16:32])
    fc1 = conv.hf_to_megatron_shard("decoder.layers.0.mlp.linear_fc1.weight", sd.__getitem__, shape, 1, 2)
    assert torch.equal(fc1[:48], sd["model.layers.0.mlp.gate_proj.weight"][48:])  # rank 1: [gate_1; up_1]
    assert torch.equal(fc1[48:], sd["model.layers.0.mlp.up_proj.weight"][48:])


DENSE_QWEN3 = {"architectures": ["Qwen3ForCausalLM"], "num_attention_heads": 4, "num_key_value_heads": 2,
               "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 259,
               "rope_theta": 10000.0}
"""A small dense Qwen3 config.json (the keys the converter reads)."""


def test_converter_refuses_what_it_does_not_map():
    base = DENSE_QWEN3
    with pytest.raises(conv.ConversionError, match="does not divide num_key_value_heads"):
        conv.shape_from_hf_config(base, tp=4)
    with pytest.raises(conv.ConversionError, match="architecture"):
        conv.shape_from_hf_config(base | {"architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(conv.ConversionError, match="rope type 'yarn'"):
        conv.shape_from_hf_config(base | {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert conv.shape_from_hf_config(base, tp=2).padded_vocab_size == 512


# --------------------------------------------------------------------------- mixture of experts
def _tiny_moe(tmp_path, layers=4, experts=8, sparse_step=2, mlp_only=(2,)):
    """A tiny Qwen3-MoE saved by transformers itself: its checkpoint names (one module per expert) are the
    HF side of the converter. Layers: MoE where HF's rule says ((i + 1) % sparse_step == 0, not mlp_only)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
    from safetensors.torch import load_file

    cfg = Qwen3MoeConfig(vocab_size=259, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         num_experts=experts, num_experts_per_tok=2, decoder_sparse_step=sparse_step,
                         mlp_only_layers=list(mlp_only), tie_word_embeddings=False, max_position_embeddings=128)
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(cfg)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_()  # every tensor distinct, so a swapped or misplaced one cannot hide
    model.save_pretrained(tmp_path)
    return load_file(tmp_path / "model.safetensors"), (tmp_path / "config.json").read_text()


@pytest.mark.parametrize("ep", [1, 2, 4])
def test_expert_weights_convert_both_ways_bitwise_across_expert_parallel_ranks(tmp_path, ep):
    """HF checkpoint -> each EP rank's Megatron tensors (local expert names) -> HF is the identity, bit for bit;
    each rank holds its own contiguous E / EP experts; the router is HF's gate; dense layers stay dense."""
    import json

    hf_sd, config = _tiny_moe(tmp_path)
    shape = conv.shape_from_hf_config(json.loads(config), ep=ep)
    assert shape.moe_layers == (1, 3) and (shape.num_experts, shape.moe_top_k, shape.moe_ffn_hidden_size) == (8, 2, 32)
    back: dict[str, torch.Tensor] = {}
    held: list[int] = []
    for rank in range(ep):
        experts = conv.experts_of_rank(shape.num_experts, ep, rank)
        held += list(experts)
        for name in conv.megatron_param_names(shape, experts=experts):
            mine = conv.hf_to_megatron_full(name, hf_sd.__getitem__, shape)
            expert = conv.expert_index(name)
            if expert is not None:  # the name Megatron gives it on this rank, and back
                local = conv.with_expert(name, expert - experts.start)
                assert conv.expert_index(local) < shape.num_experts // ep
                name = conv.with_expert(local, experts.start + conv.expert_index(local))
            for k, v in conv.megatron_full_to_hf(name, mine, shape).items():
                assert k not in back or torch.equal(back[k], v), k  # replicated tensors agree across ranks
                back[k] = v
    assert held == list(range(8))
    assert set(back) == set(hf_sd)
    for k, v in hf_sd.items():
        assert torch.equal(back[k], v), k
    fc1 = conv.hf_to_megatron_full("decoder.layers.3.mlp.experts.local_experts.5.linear_fc1.weight",
                                   hf_sd.__getitem__, shape)
    assert torch.equal(fc1, torch.cat([hf_sd["model.layers.3.mlp.experts.5.gate_proj.weight"],
                                       hf_sd["model.layers.3.mlp.experts.5.up_proj.weight"]]))
    assert "decoder.layers.2.mlp.linear_fc1.weight" in conv.megatron_param_names(shape)  # mlp_only_layers


def test_the_converter_reads_both_spellings_of_the_expert_count_and_refuses_what_megatron_cannot_split(tmp_path):
    import json

    _, config = _tiny_moe(tmp_path)
    saved = json.loads(config)  # transformers 5 writes num_local_experts; hub configs say num_experts
    hub = {k: v for k, v in saved.items() if k != "num_local_experts"} | {"num_experts": 8}
    assert conv.shape_from_hf_config(saved) == conv.shape_from_hf_config(hub)
    with pytest.raises(conv.ConversionError, match="expert_parallel = 3 does not divide the model's 8 experts"):
        conv.shape_from_hf_config(hub, ep=3)
    with pytest.raises(conv.ConversionError, match="tensor_parallel = 2 with a mixture-of-experts model"):
        conv.shape_from_hf_config(hub, tp=2)
    with pytest.raises(conv.ConversionError, match="expert_parallel = 2 with a dense model"):
        conv.shape_from_hf_config(DENSE_QWEN3, ep=2)
    with pytest.raises(conv.ConversionError, match="shared experts"):
        conv.shape_from_hf_config(hub | {"shared_expert_intermediate_size": 64})
