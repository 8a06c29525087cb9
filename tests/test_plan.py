"""tandem.lab.plan: its arithmetic derived by hand for a small model, its estimates against published
figures (each within 15%), its verdicts for Qwen3 on the reference node, and its command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tandem.config import load_config
from tandem.lab.plan import memory as mem
from tandem.lab.plan.__main__ import main
from tandem.lab.plan.planner import TrainerSetting, candidate_changes, longest_fitting_seq, plan_node, trainer_memory
from tandem.lab.plan import published
from tandem.lab.plan.published import CASES
from tandem.lab.plan.shape import ModelShape, PlanError, bundled_config, shape_from_hf

ROOT = Path(__file__).resolve().parents[1]
NODE_14B, NODE_4B = str(ROOT / "configs/node_qwen3_14b.toml"), str(ROOT / "configs/node_qwen3_4b.toml")
GIB = mem.GIB

# h = 64, q = 4 heads x 16 = 64, kv = 2 heads x 16 = 32, f = 256, V = 300, untied, Qwen3 q/k norms.
SMALL = ModelShape(name="small", layers=2, hidden=64, heads=4, kv_heads=2, head_dim=16, ffn=256, vocab=300,
                   tied=False, qk_norm=True)


# --------------------------------------------------------------------------- by hand: parameters
def test_parameter_count_by_hand():
    # per layer: q 64*64 = 4096, k 64*32 = 2048, v 2048, o 64*64 = 4096 -> 12288
    #            MLP 3*64*256 = 49152; norms 2*64 = 128; q/k norms 2*16 = 32 -> 61600
    assert SMALL.layer_params() == 61_600
    # 2 layers 123200 + embedding 300*64 = 19200 + lm_head 19200 + final norm 64
    assert SMALL.total_params() == 161_664


def test_rank_parameters_by_hand():
    # TP 2: vocab padded to a multiple of 128*2 -> 512. Per layer (12288 + 49152)/2 = 30720 sharded
    # + 160 replicated (norms, q/k norms) = 30880; x2 layers = 61760; embedding 512*64/2 = 16384,
    # lm_head 16384, final norm 64.
    assert SMALL.padded_vocab(2) == 512
    assert SMALL.rank_params(tp=2, pp=1, stage=0) == 94_592
    # PP 2: stage 0 = one layer + embedding; stage 1 = one layer + final norm + lm_head.
    assert SMALL.rank_params(tp=2, pp=2, stage=0) == 30_880 + 16_384
    assert SMALL.rank_params(tp=2, pp=2, stage=1) == 30_880 + 64 + 16_384
    # Tied: one matrix at PP 1; with PP 2 the last stage keeps its own copy as the output layer.
    tied = replace(SMALL, tied=True)
    assert tied.total_params() == 161_664 - 19_200
    assert tied.rank_params(tp=2, pp=1, stage=0) == 94_592 - 16_384
    assert tied.rank_params(tp=2, pp=2, stage=1) == 30_880 + 64 + 16_384


def test_training_state_by_hand():
    # 94592 parameters, DP 2, bf16 + distributed optimizer: 2 B weights, 4 B fp32 grads, 12 B / 2 optimizer.
    st = mem.training_state(94_592, 94_592, 2)
    assert (st.weights, st.grads, st.optimizer) == (189_184, 378_368, 567_552)
    assert st.total == 1_135_104 == 94_592 * (6 + 12 // 2)
    # Without the distributed optimizer: 18 B/param (Megatron's theoretical_memory_usage.py).
    assert mem.training_state(94_592, 94_592, 2, distributed=False).total == 94_592 * 18
    # LoRA-style: only 1000 trainable -> grads and optimizer of those only.
    lora = mem.training_state(94_592, 1_000, 2)
    assert (lora.weights, lora.grads, lora.optimizer) == (189_184, 4_000, 6_000)


# --------------------------------------------------------------------------- by hand: activations
def test_layer_activations_by_hand():
    # bf16 (2 B), TP 2, tandem's stack: whole on every rank 2 norm blocks x 3 copies x 2 B x 64 = 768;
    # split by TP: q/k norms 2*(3*64 + 3*32) = 576, attention 2*(2*64 + 2*64) = 512 (K, V expanded
    # to the 4 query heads), SwiGLU 2*5*256 = 2560 -> 3648 / 2 = 1824. Per token: 768 + 1824.
    assert mem.layer_bytes_per_token(SMALL, mem.TANDEM_MEGATRON, tp=2) == 2_592
    # TP 1: 768 + 3648.
    assert mem.layer_bytes_per_token(SMALL, mem.TANDEM_MEGATRON, tp=1) == 4_416


def test_stage_activations_by_hand():
    # micro-batch 2 x 128 = 256 tokens, TP 2, no recompute:
    # layers 256 x 2 x 2592 = 1327104; head = final norm 3*2*64 = 384 + logits 28 B x 512/2 = 7168
    # per token -> 256 x 7552 = 1933312.
    acts = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=1, stage=0, recompute=False)
    assert (acts.layers, acts.head, acts.recompute_working_set) == (1_327_104, 1_933_312, 0)
    assert acts.total == 3_260_416
    # Full recompute: each layer keeps its input 256 x 2 B x 64 = 32768 (x2 layers = 65536); one
    # layer recomputed = 256 x 2592 = 663552, which never coincides with the logits: max of the two.
    rec = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=1, stage=0, recompute=True)
    assert (rec.layers, rec.recompute_working_set) == (65_536, 663_552)
    assert rec.total == 65_536 + 1_933_312
    # TP 1 uses tandem.losses on the whole (padded: 384) vocab at 16 B: 256 x (384 + 16*384).
    assert mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=1, pp=1, stage=0,
                                 recompute=False).head == 1_671_168
    # PP 2 (1F1B): stage 0 holds 2 micro-batches of its 1 layer, stage 1 one plus the logits.
    first = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=2, stage=0, recompute=False)
    last = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=2, stage=1, recompute=False)
    assert (first.total, last.total) == (2 * 663_552, 663_552 + 1_933_312)


def test_chunked_head_by_hand():
    # Chunks of 32 of the 256 tokens, TP 2, bf16: the final norm block as before (256 x 384 = 98304) and
    # one chunk's logits: 32 x (22 B per element + 2 for the bf16 matmul output) x 512/2 = 196608.
    head = mem.head_bytes(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, chunk=32)
    assert head == 98_304 + 196_608
    # TP 1 (18 B, fp32 activations: no bf16 output): 256 x 3*4*64 + 32 x 18 x 384 = 196608 + 221184
    fp32 = replace(mem.TANDEM_MEGATRON, act_bytes=4)
    assert mem.head_bytes(SMALL, fp32, tokens=256, tp=1, chunk=32) == 417_792
    # A chunk larger than the micro-batch is the micro-batch: 256 x (24 x 256) + 98304
    assert mem.head_bytes(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, chunk=4096) == 98_304 + 256 * 24 * 256
    # The chunked head replaces the whole logits in the stage's total (recompute off: layers + head).
    acts = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=1, stage=0, recompute=False,
                                 logit_chunk=32)
    assert acts.total == 1_327_104 + 294_912


def test_offloaded_optimizer_by_hand():
    # 94592 trainable parameters, DP 2, bf16, distributed. Not offloaded: (4 + 8) / 2 = 6 B -> 567552.
    assert mem.optimizer_bytes(94_592, 2) == (567_552, 0)
    # Half offloaded, precision-aware: the GPU keeps the other half's fp32 copy and moments,
    # 0.5 x 12 / 2 = 3 B -> 283776; the host 0.5 x 16 / 2 = 4 B (fp32 copy, m, v, pinned fp32 grad) -> 378368.
    assert mem.optimizer_bytes(94_592, 2, offload_fraction=0.5, precision_aware=True) == (283_776, 378_368)
    # Without the precision-aware optimizer the distributed optimizer's own fp32 master of the offloaded
    # half stays on the GPU too: + 0.5 x 4 / 2 = 1 B -> 378368.
    assert mem.optimizer_bytes(94_592, 2, offload_fraction=0.5) == (378_368, 378_368)
    # All offloaded: nothing on the GPU, 16 / 2 = 8 B on the host; fp32 training has no master copy.
    assert mem.optimizer_bytes(94_592, 2, offload_fraction=1.0, precision_aware=True) == (0, 756_736)
    assert mem.optimizer_bytes(94_592, 2, bf16=False, offload_fraction=0.5) == (189_184, 378_368)
    st = mem.training_state(94_592, 94_592, 2, grad_bytes=2, offload_fraction=1.0, precision_aware=True)
    assert (st.weights, st.grads, st.optimizer, st.host, st.total) == (189_184, 189_184, 0, 756_736, 378_368)


def test_trainer_rank_by_hand():
    s = TrainerSetting(backend="megatron", gpus=4, tp=2, pp=1, micro_batch=2, recompute=False, seq_len=128)
    rank = trainer_memory(SMALL, s)
    assert s.dp == 2 and rank.params == 94_592
    assert rank.total == 1_135_104 + 3_260_416
    # Packed by a budget of 200 tokens: the longest sample (128) fits in it, so a micro-batch holds 200
    # tokens; with a 100-token budget the 128-token sample is alone: 128.
    assert (replace(s, max_tokens=200).tokens, replace(s, max_tokens=100).tokens, s.tokens) == (200, 128, 256)
    # Everything on: chunked head (32), all the optimizer offloaded, bf16 grads, 256 tokens:
    # state 189184 + 189184 + 0; activations 1327104 + 294912 (test_chunked_head_by_hand).
    lean = replace(s, logit_chunk=32, offload_fraction=1.0, precision_aware=True, grad_bytes=2)
    lean_rank = trainer_memory(SMALL, lean)
    assert lean_rank.total == 378_368 + 1_622_016 and lean_rank.state.host == 756_736


def test_engine_kv_by_hand():
    # K and V x 2 layers x 2 KV heads x 16 x 2 B = 256 B per token; weights 161664 x 2 B.
    assert mem.kv_bytes_per_token(SMALL) == 256
    e = mem.sglang_memory(SMALL, mem.DEVICE_RESERVE + 10_000_000, 0.5)
    assert e.weights == 323_328
    assert e.kv_pool == 5_000_000 - 323_328
    assert e.kv_tokens == 4_676_672 // 256 == 18_268


# --------------------------------------------------------------------------- the bundled models
def test_qwen3_parameter_totals_match_the_model_cards():
    """Qwen's model cards: Qwen3-14B 14.8B parameters (13.2B non-embedding), Qwen3-4B 4.0B (3.6B)."""
    q14 = shape_from_hf(bundled_config("Qwen/Qwen3-14B") or {}, "Qwen/Qwen3-14B")
    q4 = shape_from_hf(bundled_config("Qwen/Qwen3-4B") or {}, "Qwen/Qwen3-4B")
    assert q14.total_params() == 14_768_307_200
    assert round(q14.total_params() / 1e9, 1) == 14.8
    assert round((q14.total_params() - 2 * q14.embedding_params()) / 1e9, 1) == 13.2
    assert q4.total_params() == 4_022_468_096 and q4.tied
    assert round((q4.total_params() - q4.embedding_params()) / 1e9, 1) == 3.6


# --------------------------------------------------------------------------- published figures
def case(key: str):
    return next(c for c in CASES if c.key == key)


def test_megatron_functional_test_static_memory():
    """Megatron-LM tests/functional_tests/test_cases/gpt/gpt3_7b_tp4_pp1_memory_speed (commit f5590597c4),
    golden_values_dev_dgx_h100.json: mem-allocated-bytes 20,663,519,232 on a DGX H100 (TP 4, DP 2,
    bf16, distributed optimizer) - the weights, grads and optimizer state of one rank."""
    assert abs(case("megatron_7b_static").error) < 0.15


def test_megatron_functional_test_peak_memory():
    """Same test and file: mem-max-allocated-bytes 57,143,791,616 (micro-batch 2 x 8192 tokens, no
    recompute, no sequence parallelism), with Transformer Engine's kernels (memory.MEGATRON_TE)."""
    assert abs(case("megatron_7b_peak").error) < 0.15


def test_sglang_kv_capacity_llama_8b_h100():
    """sgl-project/sglang PR #4760 (https://github.com/sgl-project/sglang/pull/4760): Llama-3.1-8B-Instruct
    on an 80 GB Hopper GPU (FlashAttention 3; 63.48 + 15.11 = 78.6 GiB free before loading), SGLang's
    default mem_fraction_static 0.88 at TP 1:
    'KV Cache is allocated. #tokens: 442750'."""
    assert abs(case("sglang_llama_8b_kv").error) < 0.15


def test_zero_paper_model_states():
    """Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054), Figure 1: 7.5B parameters, K = 12, DP 64:
    120 GB per GPU for plain data parallelism, 31.4 GB with the optimizer states partitioned."""
    assert abs(case("zero_baseline").error) < 0.15
    assert abs(case("zero_os").error) < 0.15


def test_chunked_and_whole_loss_head_against_liger_kernel_benchmarks():
    """linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv @ b5672a153b (A100-SXM4-80GB, Liger 0.2.1),
    fused_linear_cross_entropy, full (forward + backward), memory at 32,768 tokens, H 4096, V 128256, bf16:
    Liger's token-chunked head 5,794.6 MiB, torch's Linear + CrossEntropyLoss 27,582.5 MiB. The planner's head
    term (memory.head_bytes) with each implementation's bytes per logit element, plus the harness' resident
    tensors (tandem.lab.plan.published)."""
    assert abs(case("liger_chunked_head").error) < 0.15
    assert abs(case("torch_whole_head").error) < 0.15


def test_optimizer_offload_against_megatron_bridge():
    """NVIDIA-NeMo/Megatron-Bridge docs/training/cpu-offloading.md (PR #3062): HybridDeviceOptimizer at 100%
    saves 15.3 GB per GPU on Qwen3-30B-A3B, TP 2, PP 2, EP 4, 16 H100s. The planner's optimizer term
    (memory.optimizer_bytes, without the precision-aware optimizer) over that layout's parameters per rank."""
    dense, experts = published.qwen3_30b_optimizer_params()
    # last stage: 24 layers x (attention 18874368 / TP 2 + norms 4096 + q/k norms 256 + router 262144)
    # + output layer 152064 x 2048 / 2 + final norm 2048; experts: 24 x 32 x 3 x 2048 x 768
    assert (dense, experts) == (24 * (9_437_184 + 4_096 + 256 + 262_144) + 155_713_536 + 2_048,
                                24 * 32 * 3 * 2048 * 768)
    # Adam's m and v (8 B) of dense / DP 4 + experts / expert-DP 2 leave the GPU:
    assert published.bridge_offload_saving_gb() == pytest.approx((8 * dense / 4 + 8 * experts / 2) / 1e9, abs=1e-6)
    assert abs(case("bridge_qwen3_30b_offload").error) < 0.15


# --------------------------------------------------------------------------- Qwen3 on the reference node
FEATURES_OFF = ["--trainer.logprob_chunk_tokens", "0", "--trainer.max_tokens_per_micro_batch", "0",
                "--trainer.megatron.optimizer_cpu_offload", "false", "--trainer.megatron.precision_aware_optimizer",
                "false"]


def node_plan(config: str, *overrides: str):
    from tandem.lab.plan.shape import load_shape

    cfg = load_config(["--config", config, *overrides])
    return plan_node(cfg, load_shape(cfg.model), 80 * GIB)


def qwen14_rank(tp: int, recompute: bool):
    return node_plan(NODE_14B, *FEATURES_OFF, "--trainer.megatron.tensor_parallel", str(tp),
                     "--trainer.megatron.recompute", str(recompute).lower())


def test_qwen3_14b_fits_four_80gb_trainer_gpus_at_32k_with_the_memory_features():
    """configs/node_qwen3_14b.toml as shipped: a 32,768-token trajectory at TP 4 with recompute, the loss head
    in chunks of 4,096, half of the optimizer offloaded (precision-aware), packed micro-batches: 58.2 GiB."""
    plan = node_plan(NODE_14B)
    s, rank = plan.trainer, plan.rank
    assert s is not None and rank is not None and plan.fits and plan.change is None
    assert (s.seq_len, s.tokens, s.tp, s.dp, s.recompute) == (32_768, 32_768, 4, 1, True)
    assert (s.logit_chunk, s.max_tokens, s.offload_fraction, s.precision_aware) == (4096, 32_768, 0.5, True)
    assert rank.total / GIB == pytest.approx(58.19, abs=0.01)
    # The optimizer: 3.69 B parameters x 0.5 x 12 B on the GPU, x 0.5 x 16 B pinned on the host.
    assert rank.state.optimizer == pytest.approx(rank.params * 6, abs=1)
    assert rank.state.host == pytest.approx(rank.params * 8, abs=1)
    # The head: the final norm block + one chunk, 4096 x 38016 (vocab 151936 padded to 152064, / TP 4) x 24 B.
    assert rank.activations.head == 32_768 * 3 * 2 * 5120 + 4096 * 38_016 * 24


@pytest.mark.parametrize("tp,recompute,total_gib", [(2, False, 377.2), (2, True, 160.9), (4, False, 247.2),
                                                     (4, True, 107.8)])
def test_qwen3_14b_does_not_fit_without_the_memory_features(tp, recompute, total_gib):
    plan = qwen14_rank(tp, recompute)
    assert plan.rank is not None and not plan.trainer_fits and not plan.fits
    assert plan.rank.total / GIB == pytest.approx(total_gib, abs=0.1)
    assert plan.change is not None and plan.change.offload_fraction == 1.0  # the search finds the offload
    assert plan.engines is not None and plan.engines.fits  # the engines fit either way


def test_qwen3_14b_smallest_change_is_the_optimizer_offload():
    """At TP 4 with recompute (features off) one knob fits: the whole optimizer offloaded, precision-aware,
    which leaves 107.83 - 41.27 GiB (the fp32 master and Adam moments of 3.69 B parameters)."""
    plan = qwen14_rank(4, True)
    assert plan.change is not None and plan.change_rank is not None and plan.rank is not None
    c = plan.change
    assert (c.logit_chunk, c.tp, c.recompute, c.micro_batch, c.offload_fraction, c.precision_aware) == (
        0, 4, True, 1, 1.0, True)
    assert plan.rank.total - plan.change_rank.total == plan.rank.params * 12


def test_qwen3_14b_fits_only_shorter_micro_batches_at_tp4_with_recompute():
    plan = qwen14_rank(4, True)
    assert plan.trainer is not None
    longest = longest_fitting_seq(plan.model, plan.trainer, plan.trainer_budget)
    assert 10_000 < longest < 11_000
    assert trainer_memory(plan.model, replace(plan.trainer, seq_len=longest)).total <= plan.trainer_budget


def test_qwen3_14b_state_at_tp2_is_the_89_gb_of_the_earlier_note():
    plan = qwen14_rank(2, True)
    assert plan.rank is not None and plan.trainer is not None and plan.trainer.dp == 2
    assert plan.rank.state.total / 1e9 == pytest.approx(88.6, abs=0.1)  # 7.38 B params x (6 + 12/2) B


def test_smallest_change_for_qwen3_4b_at_tp2_without_recompute():
    # The shipped 4B config already chunks the loss head; without recompute at TP 2 the smallest change is
    # recompute on (one knob). With the whole head as well, the head is the first knob tried: chunks of 4096
    # plus recompute.
    plan = node_plan(NODE_4B, "--trainer.megatron.tensor_parallel", "2", "--trainer.megatron.recompute", "false")
    assert not plan.trainer_fits and plan.change is not None
    assert (plan.change.logit_chunk, plan.change.tp, plan.change.recompute) == (4096, 2, True)
    plan = node_plan(NODE_4B, "--trainer.megatron.tensor_parallel", "2", "--trainer.megatron.recompute", "false",
                     "--trainer.logprob_chunk_tokens", "0")
    assert plan.change is not None and (plan.change.logit_chunk, plan.change.tp, plan.change.recompute) == (
        4096, 2, True)


def test_candidate_changes_go_head_tp_recompute_micro_batch_offload():
    s = TrainerSetting(backend="megatron", gpus=4, tp=1, pp=1, micro_batch=2, recompute=False, seq_len=128)
    knobs = [(c.logit_chunk, c.tp, c.recompute, c.micro_batch, c.offload_fraction) for c in candidate_changes(SMALL, s)]
    # single changes, in the knobs' order, smaller steps first (chunks of 4096 and 1024 are larger than the
    # 256-token micro-batch: the search does not try them)
    assert knobs[:5] == [(0, 2, False, 2, 0.0), (0, 1, True, 2, 0.0), (0, 1, False, 1, 0.0),
                         (0, 1, False, 2, 0.5), (0, 1, False, 2, 1.0)]
    assert knobs[5] == (0, 2, True, 2, 0.0)  # then pairs
    assert knobs[-1] == (0, 2, True, 1, 1.0)  # TP 4 does not divide the 2 KV heads
    assert all(c.precision_aware for c in candidate_changes(SMALL, s) if c.offload_fraction)
    big = replace(s, seq_len=8192)  # 16384 tokens: both chunk sizes are tried, 4096 first
    assert [c.logit_chunk for c in candidate_changes(SMALL, big)][:2] == [4096, 1024]
    packed = replace(s, max_tokens=1024)  # the packing budget halves down to the longest sample
    assert sorted({c.max_tokens for c in candidate_changes(SMALL, packed)}) == [128, 256, 512, 1024]


# --------------------------------------------------------------------------- command line
def test_cli_exit_codes(capsys):
    assert main(["--config", NODE_4B]) == 0
    assert "verdict: FITS" in capsys.readouterr().out
    assert main(["--config", NODE_14B]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "verdict: FITS"
    assert main(["--config", NODE_14B, *FEATURES_OFF]) == 1
    out = capsys.readouterr().out
    assert "DOES NOT FIT" in out and "smallest change that fits: whole-micro-batch loss head" in out


def test_cli_json(capsys):
    assert main(["--config", NODE_4B, "--json", "--gpu-memory-gb", "80"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["fits"] and out["model"]["total_params"] == 4_022_468_096 and out["engines"]["kv_tokens"] > 0


@pytest.mark.parametrize("args,cause", [
    (["--trainer.gpus", "3", "--trainer.megatron.tensor_parallel", "3"],
     "tensor_parallel = 3 does not divide the model's num_attention_heads (40)"),
    (["--trainer.megatron.tensor_parallel", "3"], "trainer.gpus (4) must be a multiple"),
    (["--gpu-memory-gb", "lots"], "--gpu-memory-gb: 'lots' is not a number"),
    (["--trainer.megatron.pipeline_parallel", "3", "--trainer.gpus", "3", "--trainer.megatron.tensor_parallel", "1"],
     "pipeline_parallel = 3 does not divide the model's num_hidden_layers (40)"),
])
def test_cli_bad_input_exits_2_naming_the_cause(capsys, args, cause):
    assert main(["--config", NODE_14B, *args]) == 2
    err = capsys.readouterr().err
    assert cause in err and err.startswith("tandem.lab.plan: ") and err.count("\n") == 1


def test_unknown_local_directory_is_bad_input(tmp_path, capsys):
    assert main(["--config", NODE_14B, "--model.path", str(tmp_path)]) == 2
    assert "without config.json" in capsys.readouterr().err


@pytest.mark.e2e
def test_python_dash_m_runs_offline():
    run = subprocess.run([sys.executable, "-m", "tandem.lab.plan", "--config", NODE_14B, "--gpu-memory-gb", "141"],
                         check=False, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert run.returncode in (0, 1), run.stderr
    assert "Qwen/Qwen3-14B (14.77 B parameters" in run.stdout


def test_plan_error_is_a_value_error():
    assert issubclass(PlanError, ValueError)


# --------------------------------------------------------------------------- colocated on one GPU
ONE_GPU = str(ROOT / "configs/one_gpu_qwen3_4b.toml")


@pytest.mark.parametrize("model, params, hidden, ffn, tied", [("Qwen/Qwen3-4B", 4_022_468_096, 2560, 9728, True),
                                                              ("Qwen/Qwen3-8B", 8_190_735_360, 4096, 12288, False)])
def test_qwen3_colocated_on_one_80gb_gpu_by_hand(model, params, hidden, ffn, tied):
    """configs/one_gpu_qwen3_4b.toml (Megatron on 1 GPU, recompute, the head in 4096-token chunks, the whole
    optimizer on the host, 8192-token packed micro-batches; one SGLang engine at mem_fraction_static 0.5),
    each phase derived by hand. Both fit: 4B with 29.9 GiB to spare (generation is its peak), 8B with 15.9
    (training is)."""
    plan = node_plan(ONE_GPU, "--model", model)
    p, rank = plan.colocated, plan.rank
    assert p is not None and rank is not None and plan.fits
    assert plan.model.total_params() == params and rank.params == params  # TP 1: the rank holds it all
    usable = 80 * GIB - mem.DEVICE_RESERVE
    # Training state: bf16 weights 2 + fp32 grads 4 + optimizer on the GPU 0 (all on the host: 16 pinned) B.
    assert (rank.state.weights, rank.state.grads, rank.state.optimizer, rank.state.host) == (
        2 * params, 4 * params, 0, 16 * params)
    # Activations, 8192 tokens, recompute: each layer's input kept (36 x 8192 x 2 B x h), then the larger of
    # one layer recomputed and the head: the final norm (3 x 2 B x h per token) + a 4096-token chunk of
    # logits at 20 B (18 + the bf16 matmul output) over the vocab 151,936 (a multiple of 128 already).
    per_token = 2 * 3 * 2 * hidden + 2 * (3 * 4096 + 3 * 1024) + 2 * 4 * 4096 + 2 * 5 * ffn
    head = 8192 * 3 * 2 * hidden + 4096 * 20 * 151_936
    assert rank.activations.layers == 36 * 8192 * 2 * hidden
    assert rank.total == 6 * params + 36 * 8192 * 2 * hidden + max(head, 8192 * per_token)
    # Generation: the engine's static pool (0.5 of the usable memory) + the trainer's bf16 weights + its reserve.
    assert p.trainer_residue == 2 * params
    assert p.generation == int(0.5 * usable) + 2 * params + 2 * GIB
    # Training: the rank + a released engine's residue (1 GiB) + the reserve.
    assert p.training == rank.total + GIB + 2 * GIB
    # Hand-over: the larger of the engine's weights resumed with the embedding in flight beside the trainer's
    # weights, and the trainer's state back (6 B/param) beside the released engine.
    assert p.handover == max(2 * params + 151_936 * hidden * 2 + 2 * params, 6 * params + GIB) + 2 * GIB
    peak = {"Qwen/Qwen3-4B": ("generation", 48.84, 29.86), "Qwen/Qwen3-8B": ("training", 62.80, 15.90)}[model]
    assert max(("generation", p.generation), ("training", p.training), ("handover", p.handover),
               key=lambda kv: kv[1])[0] == peak[0]
    assert p.peak / GIB == pytest.approx(peak[1], abs=0.01) and (usable - p.peak) / GIB == pytest.approx(peak[2], abs=0.01)


def test_qwen3_8b_colocated_with_the_torch_trainer_does_not_fit(tmp_path):
    """The torch trainer keeps fp32 weights, grads and AdamW on its GPU: 16 B/param + the bf16 autocast
    copies 2 = 18 x 8.19 B = 137 GiB of state alone, more than the GPU; the verdict says so and exits 1."""
    torch_node = tmp_path / "one_gpu_torch.toml"  # the same node without its [trainer.megatron] table
    torch_node.write_text(re.sub(r"\[trainer\.megatron\]\n(?:(?!\[).*\n)*", "", Path(ONE_GPU).read_text()))
    plan = node_plan(str(torch_node), "--model", "Qwen/Qwen3-8B", "--trainer.backend", "torch")
    assert plan.colocated is not None and not plan.fits
    assert plan.rank is not None and plan.rank.state.total == 18 * 8_190_735_360
    assert plan.colocated.trainer_residue == 0  # it keeps nothing while the engine generates
    assert main(["--config", str(torch_node), "--model", "Qwen/Qwen3-8B", "--trainer.backend", "torch"]) == 1
