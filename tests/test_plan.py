"""tandem.plan: its arithmetic derived by hand for a small model, its estimates against published
figures (each within 15%), its verdicts for Qwen3 on the reference node, and its command line."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tandem.config import load_config
from tandem.plan import memory as mem
from tandem.plan.__main__ import main
from tandem.plan.planner import TrainerSetting, candidate_changes, longest_fitting_seq, plan_node, trainer_memory
from tandem.plan.published import CASES
from tandem.plan.shape import ModelShape, PlanError, bundled_config, shape_from_hf

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
    # layers 256 x 2 x 2592 = 1327104; head = final norm 3*2*64 = 384 + logits 36 B x 512/2 = 9216
    # per token -> 256 x 9600 = 2457600.
    acts = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=1, stage=0, recompute=False)
    assert (acts.layers, acts.head, acts.recompute_working_set) == (1_327_104, 2_457_600, 0)
    assert acts.total == 3_784_704
    # Full recompute: each layer keeps its input 256 x 2 B x 64 = 32768 (x2 layers = 65536); one
    # layer recomputed = 256 x 2592 = 663552, which never coincides with the logits: max of the two.
    rec = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=1, stage=0, recompute=True)
    assert (rec.layers, rec.recompute_working_set) == (65_536, 663_552)
    assert rec.total == 65_536 + 2_457_600
    # TP 1 uses tandem.losses on the whole (padded: 384) vocab at 16 B: 256 x (384 + 16*384).
    assert mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=1, pp=1, stage=0,
                                 recompute=False).head == 1_671_168
    # PP 2 (1F1B): stage 0 holds 2 micro-batches of its 1 layer, stage 1 one plus the logits.
    first = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=2, stage=0, recompute=False)
    last = mem.stage_activations(SMALL, mem.TANDEM_MEGATRON, tokens=256, tp=2, pp=2, stage=1, recompute=False)
    assert (first.total, last.total) == (2 * 663_552, 663_552 + 2_457_600)


def test_trainer_rank_by_hand():
    s = TrainerSetting(backend="megatron", gpus=4, tp=2, pp=1, micro_batch=2, recompute=False, seq_len=128)
    rank = trainer_memory(SMALL, s)
    assert s.dp == 2 and rank.params == 94_592
    assert rank.total == 1_135_104 + 3_784_704


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


# --------------------------------------------------------------------------- Qwen3 on the reference node
def qwen14_rank(tp: int, recompute: bool):
    cfg = load_config(["--config", NODE_14B, "--trainer.megatron.tensor_parallel", str(tp),
                       "--trainer.megatron.recompute", str(recompute).lower()])
    from tandem.plan.shape import load_shape

    return plan_node(cfg, load_shape(cfg.model), 80 * GIB)


@pytest.mark.parametrize("tp,recompute,total_gib", [(2, False, 395.8), (2, True, 179.5), (4, False, 256.5),
                                                     (4, True, 117.1)])
def test_qwen3_14b_does_not_fit_four_80gb_trainer_gpus_at_32k(tp, recompute, total_gib):
    plan = qwen14_rank(tp, recompute)
    assert plan.rank is not None and not plan.trainer_fits and not plan.fits
    assert plan.rank.total / GIB == pytest.approx(total_gib, abs=0.1)
    assert plan.change is None and plan.frugal is not None  # no TP / recompute / micro-batch change fits
    assert plan.engines is not None and plan.engines.fits  # the engines do


def test_qwen3_14b_state_at_tp2_is_the_89_gb_of_the_earlier_note():
    plan = qwen14_rank(2, True)
    assert plan.rank is not None and plan.trainer is not None and plan.trainer.dp == 2
    assert plan.rank.state.total / 1e9 == pytest.approx(88.6, abs=0.1)  # 7.38 B params x (6 + 12/2) B


def test_qwen3_14b_fits_only_shorter_micro_batches_at_tp4_with_recompute():
    plan = qwen14_rank(4, True)
    assert plan.trainer is not None
    longest = longest_fitting_seq(plan.model, plan.trainer, plan.trainer_budget)
    assert 8_000 < longest < 10_000
    assert trainer_memory(plan.model, replace(plan.trainer, seq_len=longest)).total <= plan.trainer_budget


def test_smallest_change_for_qwen3_4b_is_tp4_with_recompute():
    cfg = load_config(["--config", NODE_4B, "--trainer.megatron.tensor_parallel", "2",
                       "--trainer.megatron.recompute", "false"])
    plan = plan_node(cfg, shape_from_hf(bundled_config("Qwen/Qwen3-4B") or {}, "Qwen/Qwen3-4B"), 80 * GIB)
    assert not plan.trainer_fits and plan.change is not None
    assert (plan.change.tp, plan.change.recompute, plan.change.micro_batch) == (4, True, 1)


def test_candidate_changes_go_tp_then_recompute_then_micro_batch():
    s = TrainerSetting(backend="megatron", gpus=4, tp=1, pp=1, micro_batch=2, recompute=False, seq_len=128)
    knobs = [(c.tp, c.recompute, c.micro_batch) for c in candidate_changes(SMALL, s)]
    assert knobs[:4] == [(2, False, 2), (1, True, 2), (1, False, 1), (2, True, 2)]
    assert knobs[-1] == (2, True, 1)  # TP 4 does not divide the 2 KV heads


# --------------------------------------------------------------------------- command line
def test_cli_exit_codes(capsys):
    assert main(["--config", NODE_4B]) == 0
    assert "verdict: FITS" in capsys.readouterr().out
    assert main(["--config", NODE_14B]) == 1
    assert "DOES NOT FIT" in capsys.readouterr().out


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
    assert cause in err and err.startswith("tandem.plan: ") and err.count("\n") == 1


def test_unknown_local_directory_is_bad_input(tmp_path, capsys):
    assert main(["--config", NODE_14B, "--model.path", str(tmp_path)]) == 2
    assert "without config.json" in capsys.readouterr().err


@pytest.mark.e2e
def test_python_dash_m_runs_offline():
    run = subprocess.run([sys.executable, "-m", "tandem.plan", "--config", NODE_14B, "--gpu-memory-gb", "141"],
                         check=False, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert run.returncode in (0, 1), run.stderr
    assert "Qwen/Qwen3-14B (14.77 B parameters" in run.stdout


def test_plan_error_is_a_value_error():
    assert issubclass(PlanError, ValueError)
