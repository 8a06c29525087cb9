"""tandem.lab.plan for mixture-of-experts models on the Megatron trainer with expert parallelism: each rank's
experts and dense parameters, their state sharded over expert-DP and DP, the MoE layers' activations (the k
experts' MLPs, the dispatched tokens, the router), derived by hand; the refusals; the shipped config."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tandem.lab.plan import memory as mem
from tandem.lab.plan.__main__ import main
from tandem.lab.plan.planner import TrainerSetting, _stage_memory, candidate_changes, trainer_memory
from tandem.lab.plan.shape import ModelShape, PlanError, bundled_config, shape_from_hf
from tests.test_plan import node_plan

ROOT = Path(__file__).resolve().parents[1]
MOE_NODE = str(ROOT / "configs/qwen3_30b_a3b_megatron_ep.toml")
QWEN3_30B = shape_from_hf(bundled_config("Qwen/Qwen3-30B-A3B") or {}, "Qwen/Qwen3-30B-A3B")

# test_plan.SMALL (h 64, 4 heads x 16, 2 KV heads, f 256, V 300, untied, q/k norms) with 4 experts of width 32,
# top-2, every second layer MoE: layer 0 dense, layer 1 MoE ((1 + 1) % 2 == 0, as transformers' Qwen3-MoE).
SMALL_MOE = ModelShape(name="small-moe", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=256, vocab=300,
                       tied=False, qk_norm=True, experts=4, experts_per_token=2, expert_ffn=32, moe_step=2)


def megatron(gpus: int, ep: int, **kw) -> TrainerSetting:
    return TrainerSetting(backend="megatron", gpus=gpus, tp=1, pp=kw.pop("pp", 1), micro_batch=1, recompute=False,
                          seq_len=kw.pop("seq_len", 128), ep=ep, **kw)


# --------------------------------------------------------------------------- the small model, by hand
def test_small_moe_parameters_by_hand():
    # Attention 12288 + norms 128 + q/k norms 32 = 12448 per layer. Layer 0 adds its MLP 3*64*256 = 49152;
    # layer 1 its router 4*64 = 256 and 4 experts of 3*64*32 = 6144 each. Embedding and output 300*64 each.
    assert SMALL_MOE.expert_params == 6_144 and SMALL_MOE.router_params == 256
    assert SMALL_MOE.total_params() == 12_448 * 2 + 49_152 + 256 + 4 * 6_144 + 2 * 19_200 + 64 == 137_344
    assert SMALL_MOE.total_params(active=True) == 137_344 - 2 * 6_144
    # Megatron, TP 1 (vocab padded to 384), EP 2: the rank holds 2 of the 4 experts of its one MoE layer.
    assert SMALL_MOE.rank_dense_params(1, 1, 0) == 12_448 * 2 + 49_152 + 256 + 2 * 384 * 64 + 64 == 123_520
    assert SMALL_MOE.rank_expert_params(1, 0, ep=2) == 2 * 6_144
    assert SMALL_MOE.rank_params(1, 1, 0, ep=2) == 123_520 + 12_288
    # PP 2: stage 0 holds the dense layer 0 and the embedding, stage 1 the MoE layer 1, final norm and output layer.
    assert (SMALL_MOE.stage_moe_layers(2, 0), SMALL_MOE.stage_moe_layers(2, 1)) == (0, 1)
    assert SMALL_MOE.rank_dense_params(1, 2, 0) == 12_448 + 49_152 + 384 * 64
    assert SMALL_MOE.rank_dense_params(1, 2, 1) == 12_448 + 256 + 64 + 384 * 64
    assert (SMALL_MOE.rank_expert_params(2, 0, 2), SMALL_MOE.rank_expert_params(2, 1, 2)) == (0, 12_288)


def test_small_moe_state_sharded_over_dp_and_expert_dp_by_hand():
    # 4 GPUs, EP 2: DP 4, expert-DP 4 / 2 = 2. bf16 weights 2 B, fp32 grads 4 B, optimizer 12 B / shards.
    s = megatron(4, 2)
    rank = trainer_memory(SMALL_MOE, s)
    assert (s.dp, s.expert_dp) == (4, 2)
    assert (rank.params, rank.expert_params, rank.router_params) == (135_808, 12_288, 256)
    # experts 12288 x (2 + 4 + 12/2); dense 123520 x (2 + 4 + 12/4); routers 256 x (2 + 4 + 12/4)
    assert rank.expert_state is not None and rank.router_state is not None
    assert (rank.expert_state.weights, rank.expert_state.grads, rank.expert_state.optimizer) == (
        24_576, 49_152, 73_728)
    assert rank.state.total == 12_288 * 12 + 123_520 * 9 == 1_259_136
    assert rank.router_state.total == 256 * 9
    # PP 2 on 4 GPUs, EP 2: DP 2, expert-DP 4 / (2 x 2) = 1; the most loaded stage is stage 0 (the dense MLP
    # and embedding: 86176 x (6 + 6)); stage 1 would hold 37344 dense (x 12) and 12288 expert (x 18) parameters.
    pp = replace(s, pp=2)
    assert (pp.dp, pp.expert_dp) == (2, 1)
    assert trainer_memory(SMALL_MOE, pp).state.total == 86_176 * 12
    assert _stage_memory(SMALL_MOE, pp, 1).state.total == 37_344 * 12 + 12_288 * 18


def test_small_moe_activations_by_hand():
    # bf16, TP 1, per token. Dense layer 0: 4416 (test_plan.test_layer_activations_by_hand). MoE layer 1: the
    # norm blocks 768, q/k norms 576, attention 512; 2 experts x (5 + 1 copies) x 32 x 2 B = 768; the dispatched
    # tokens 2 x 64 x 2 B = 256; the router: 2 x 8 (top-k indices) + 2 x 8 (sorted indices) + 2 x 4 (fp32 top-k
    # softmax) + 4 x (4 + 2) (fp32 probabilities [T, E] and the permuted ones) + 4 (the bool routing map) = 68.
    k = mem.TANDEM_MEGATRON
    assert mem.router_bytes_per_token(SMALL_MOE, k) == 68
    assert mem.dispatch_bytes_per_token(SMALL_MOE, k) == 256
    assert mem.moe_layer_bytes_per_token(SMALL_MOE, k) == 768 + 576 + 512 + 768 + 256 + 68 == 2_948
    # 256 tokens, no recompute: both layers kept; the router and dispatched tokens are of them.
    acts = mem.stage_activations(SMALL_MOE, k, tokens=256, tp=1, pp=1, stage=0, recompute=False)
    assert acts.layers == 256 * (4_416 + 2_948)
    assert (acts.router, acts.dispatched) == (256 * 68, 256 * 256)
    # Recompute: the dense layer (4416 > 2948) is the one-layer working set, so no router tensors at the peak.
    rec = mem.stage_activations(SMALL_MOE, k, tokens=256, tp=1, pp=1, stage=0, recompute=True)
    assert (rec.recompute_working_set, rec.router) == (256 * 4_416, 0)
    # PP 2, stage 1 holds only the MoE layer: 1 micro-batch in flight, recomputed it is the working set.
    last = mem.stage_activations(SMALL_MOE, k, tokens=256, tp=1, pp=2, stage=1, recompute=True)
    assert (last.recompute_working_set, last.router, last.dispatched) == (256 * 2_948, 256 * 68, 256 * 256)


# --------------------------------------------------------------------------- Qwen3-30B-A3B on 8 GPUs, by hand
# h 2048, 48 layers all MoE, 128 experts of 3 x 2048 x 768 = 4,718,592 parameters, router 128 x 2048 = 262,144.
# Dense per rank (TP 1, vocab 151936 = 1187 x 128, no padding): per layer attention 2048 x 4096 x 2
# + 2 x 2048 x 512 = 18,874,368, norms 4096, q/k norms 256, router 262,144 -> 19,140,864; x 48 = 918,761,472;
# embedding and output layer 2 x 151936 x 2048 = 622,329,856; final norm 2048 -> 1,541,093,376.
QWEN_DENSE = 48 * (18_874_368 + 4_096 + 256 + 262_144) + 2 * 151_936 * 2048 + 2048
EXPERT = 3 * 2048 * 768


def test_qwen3_30b_a3b_counts_match_the_model_card():
    """Qwen/Qwen3-30B-A3B's model card: 30.5B parameters, 3.3B activated, 29.9B non-embedding."""
    assert QWEN3_30B.total_params() == QWEN_DENSE + 48 * 128 * EXPERT == 30_532_122_624
    assert QWEN3_30B.total_params(active=True) == QWEN_DENSE + 48 * 8 * EXPERT == 3_353_032_704
    assert round((QWEN3_30B.total_params() - 2 * QWEN3_30B.embedding_params()) / 1e9, 1) == 29.9


@pytest.mark.parametrize("ep, expert_dp", [(8, 1), (4, 2)])
def test_qwen3_30b_a3b_expert_bytes_per_rank_on_8_gpus(ep, expert_dp):
    # EP 8: 128 / 8 = 16 experts per layer x 48 layers x 4,718,592 = 3,623,878,656 expert parameters per rank,
    # their optimizer sharded over expert-DP 8 / 8 = 1: 2 + 4 + 12 = 18 B each = 65,229,815,808 B.
    # EP 4: 32 experts per layer, 7,247,757,312 parameters, expert-DP 8 / 4 = 2: 2 + 4 + 6 = 12 B each
    # = 86,973,087,744 B. Dense, both: DP 8, 2 + 4 + 12/8 = 7.5 B x 1,541,093,376 = 11,558,200,320 B.
    s = megatron(8, ep, seq_len=4096)
    rank = trainer_memory(QWEN3_30B, s)
    experts = 48 * (128 // ep) * EXPERT
    assert (s.dp, s.expert_dp) == (8, expert_dp)
    assert rank.expert_params == experts == {8: 3_623_878_656, 4: 7_247_757_312}[ep]
    assert rank.params == QWEN_DENSE + experts
    assert rank.expert_state is not None
    assert rank.expert_state.optimizer == 12 * experts // expert_dp
    assert rank.expert_state.total == {8: 65_229_815_808, 4: 86_973_087_744}[ep]
    assert rank.state.total - rank.expert_state.total == 11_558_200_320
    # the routers: 48 x 262,144 parameters at 7.5 B (dense, over DP 8)
    assert rank.router_state is not None and rank.router_state.total == 48 * 262_144 * 15 // 2


def test_qwen3_30b_a3b_moe_layer_activations_by_hand():
    # bf16, per token: norm blocks 2 x 3 x 2 x 2048 = 24576, q/k norms 2 x (3 x 4096 + 3 x 512) = 27648,
    # attention 2 x (2 x 4096 + 2 x 4096) = 32768; 8 experts x 6 copies x 768 x 2 B = 73728; dispatched tokens
    # 8 x 2048 x 2 B = 32768; router 8 x 20 + 4 x (128 + 8) + 128 = 832 -> 192,320. (The dense-layer count with
    # intermediate_size 6144 gave 146,432: the active width 8 x 768 happens to equal it, the rest does not.)
    k = mem.TANDEM_MEGATRON
    assert mem.moe_layer_bytes_per_token(QWEN3_30B, k) == 24_576 + 27_648 + 32_768 + 73_728 + 32_768 + 832
    acts = mem.stage_activations(QWEN3_30B, k, tokens=1024, tp=1, pp=1, stage=0, recompute=False)
    assert acts.layers == 1024 * 48 * 192_320
    assert (acts.router, acts.dispatched) == (1024 * 48 * 832, 1024 * 48 * 32_768)


def test_shipped_moe_config_fits_by_hand():
    """configs/qwen3_30b_a3b_megatron_ep.toml on 80 GB GPUs: EP 4 over the trainer's 4 GPUs (expert-DP 1), bf16
    main grads, the whole optimizer on the CPU (precision-aware), recompute, 32k packed tokens, 4096-token chunks."""
    plan = node_plan(MOE_NODE)
    s, rank = plan.trainer, plan.rank
    assert s is not None and rank is not None and plan.fits
    assert (s.tp, s.ep, s.dp, s.expert_dp, s.grad_bytes, s.offload_fraction) == (1, 4, 4, 1, 2, 1.0)
    experts = 48 * 32 * EXPERT
    assert rank.params == QWEN_DENSE + experts
    # weights and grads 2 B each, nothing of the optimizer on the GPU; on the host 16 B per parameter / shards
    assert (rank.state.weights, rank.state.grads, rank.state.optimizer) == (4 * rank.params // 2,) * 2 + (0,)
    assert rank.state.host == 16 * QWEN_DENSE // 4 + 16 * experts
    # recompute: each layer's input (48 x 32768 x 2 x 2048), then the larger of one MoE layer recomputed
    # (32768 x 192,320) and the head (final norm 32768 x 3 x 2 x 2048 + a 4096-token chunk at 20 B x 151936)
    head = 32_768 * 6 * 2048 + 4096 * 20 * 151_936
    assert rank.total == 4 * rank.params + 48 * 32_768 * 4096 + max(head, 32_768 * 192_320)
    assert rank.total / mem.GIB == pytest.approx(50.71, abs=0.01)


def test_the_search_raises_ep_and_never_tp_for_an_moe_model():
    s = megatron(8, 1, seq_len=8192)
    changes = candidate_changes(QWEN3_30B, s)
    assert {c.tp for c in changes} == {1}
    assert sorted({c.ep for c in changes}) == [1, 2, 4, 8]
    assert [c.ep for c in changes if c.ep != 1][:3] == [2, 4, 8]  # single changes: EP up in smaller steps first
    assert all(c.ep == 1 for c in candidate_changes(replace(SMALL_MOE, experts=0), replace(s, gpus=4)))


def test_cli_shows_the_experts_and_their_bytes(capsys):
    assert main(["--config", MOE_NODE]) == 0
    out = capsys.readouterr().out
    assert "30.53 B parameters, 3.35 B active" in out
    assert "EP 4, expert-DP 1" in out
    assert "experts: 32 of 128 per MoE layer on each of EP 4 ranks, 48 MoE layers: 7.25 B expert and 1.54 B dense" in out
    assert "experts' state (optimizer / expert-DP 1)" in out and "dense state (optimizer / DP 4)" in out
    assert "routers' state (48 x [128, 2048], in the dense)" in out


# --------------------------------------------------------------------------- refusals
@pytest.mark.parametrize("gpus, ep, cause", [
    (3, 3, "trainer.megatron.expert_parallel = 3 does not divide the model's num_experts (4)"),
    (3, 2, "trainer.megatron.expert_parallel = 2 does not divide the data-parallel size (trainer.gpus / "
           "pipeline_parallel = 3)"),
])
def test_expert_parallel_that_does_not_divide_is_refused(gpus, ep, cause):
    with pytest.raises(PlanError) as err:
        trainer_memory(SMALL_MOE, megatron(gpus, ep))
    assert str(err.value) == cause


def test_moe_at_tp_above_1_and_lora_are_refused_and_dense_models_keep_ep_1():
    with pytest.raises(PlanError, match=r"tensor_parallel = 2 with a mixture-of-experts model: megatron-core 0.16.1 "
                                        r"trains MoE layers at TP > 1 only with sequence parallelism"):
        trainer_memory(SMALL_MOE, replace(megatron(4, 1), tp=2))
    with pytest.raises(PlanError, match=r"trainer.lora.rank = 8 with a mixture-of-experts model"):
        trainer_memory(SMALL_MOE, replace(megatron(4, 1), lora_rank=8, lora_targets=("q_proj",)))
    with pytest.raises(PlanError, match=r"expert_parallel = 2 with a dense model \(no experts\): set it to 1"):
        trainer_memory(replace(SMALL_MOE, experts=0), megatron(4, 2))


@pytest.mark.parametrize("config, args, cause", [
    (MOE_NODE, ["--trainer.megatron.tensor_parallel", "2"], "tensor_parallel = 2 with a mixture-of-experts model"),
    (str(ROOT / "configs/node_qwen3_4b.toml"), ["--trainer.megatron.expert_parallel", "2"],
     "expert_parallel = 2 with a dense model"),
])
def test_cli_refusals_exit_2_naming_the_key(capsys, config, args, cause):
    assert main(["--config", config, *args]) == 2
    err = capsys.readouterr().err
    assert cause in err and err.startswith("tandem.lab.plan: ") and err.count("\n") == 1
