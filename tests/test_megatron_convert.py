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


def test_converter_refuses_what_it_does_not_map():
    base = {"architectures": ["Qwen3ForCausalLM"], "num_attention_heads": 4, "num_key_value_heads": 2,
            "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "vocab_size": 259,
            "rope_theta": 10000.0}
    with pytest.raises(conv.ConversionError, match="does not divide num_key_value_heads"):
        conv.shape_from_hf_config(base, tp=4)
    with pytest.raises(conv.ConversionError, match="architecture"):
        conv.shape_from_hf_config(base | {"architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(conv.ConversionError, match="rope type 'yarn'"):
        conv.shape_from_hf_config(base | {"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})
    assert conv.shape_from_hf_config(base, tp=2).padded_vocab_size == 512
