"""tandem.lab.plan against published memory figures, and against tandem's own stack measured on CPU.

    python bench/plan_validation.py              # published figures, CPU checks, Qwen3 verdicts
    python bench/plan_validation.py --no-cpu     # skip the CPU measurements (they need megatron-core)

1. Published figures (tandem.lab.plan.published): Megatron-LM's functional-test memory for a 7B
   GPT, SGLang's logged KV capacity for Llama-3.1-8B on an H100, ZeRO's Figure 1.
2. tandem's Megatron stack on CPU (fp32, TP = 1, one process over gloo, as tests/test_megatron_cpu.py):
   - the activations one layer keeps, summed over the unique storages autograd saves during a
     forward (torch.autograd.graph.saved_tensors_hooks), against memory.layer_bytes_per_token;
   - the same for one megatron-core MoE layer against one dense layer of the same attention (the
     difference: the experts' MLPs, the dispatched tokens and the router in place of the MLP), against
     memory.moe_layer_bytes_per_token;
   - the loss head's peak per logit element, whole (tandem.losses at TP = 1, megatron_head's
     vocab-parallel log-probs at TP > 1, each with the no-grad entropy metric and the backward) and
     chunked (losses.chunked_scores, per element of one chunk's logits), read as the peak resident
     set (VmHWM, reset through /proc/self/clear_refs) with glibc made to mmap every allocation
     over 64 KiB so freed tensors leave the resident set at once;
   - a whole train step's peak resident set against the planner's activations.
   Each measurement runs in a fresh process.
3. The planner's verdicts for configs/node_qwen3_14b.toml and node_qwen3_4b.toml on 4 x 80 GB: as
   shipped (with their memory features), and with the features off at TP 2 and 4, recompute off and on.
Results: bench/results/plan_validation.md and .json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import torch

from tandem.config import load_config
from tandem.lab.plan import memory as mem
from tandem.lab.plan.planner import longest_fitting_seq, plan_node
from tandem.lab.plan.published import CASES
from tandem.lab.plan.shape import load_shape, tiny_shape

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
CPU_MODEL = {"hidden_size": 512, "num_layers": 4, "num_heads": 8, "num_kv_heads": 2, "head_dim": 64,
             "intermediate_size": 1536, "max_position_embeddings": 8192}
CPU_BATCH, CPU_SEQ = 4, 1024
LOSS_TOKENS, LOSS_VOCAB = 4096, 8192
CHUNK, CHUNK_HIDDEN = 1024, 64  # a small hidden size: the head's logits dominate what the chunked head allocates


# --------------------------------------------------------------------------- measurements (child processes)
def rss(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


def peak_above_now(fn) -> int:
    """Peak resident bytes while `fn` runs, above the resident set before it."""
    base = rss("VmRSS:")
    Path("/proc/self/clear_refs").write_text("5")
    fn()
    return rss("VmHWM:") - base


def cpu_config(cache_dir: str):
    from tandem.config import build_config

    return build_config({
        "run": {"cache_dir": cache_dir}, "model": {"tiny": CPU_MODEL},
        "trainer": {"backend": "megatron", "device": "cpu", "micro_batch_size": CPU_BATCH, "minibatches": 1,
                    "megatron": {"tensor_parallel": 1}},
        "rollout": {"sampling": {"temperature": 1.0}}})


def measure_layers(trainer) -> dict:
    """Bytes per token per layer that autograd saves (activations only: parameters excluded)."""
    ids = torch.randint(0, 256, (CPU_BATCH, CPU_SEQ))
    params = {p.untyped_storage().data_ptr() for p in trainer.model.parameters()}
    layer_sizes: dict[int, int] = {}

    def pack(x):
        st = x.untyped_storage()
        if st.data_ptr() not in params and st.nbytes() >= CPU_BATCH * CPU_SEQ * 4:
            layer_sizes.setdefault(st.data_ptr(), st.nbytes())
        return x

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda x: x):
        trainer.step.logits(trainer.train_model, ids)
    tokens, layers = CPU_BATCH * CPU_SEQ, CPU_MODEL["num_layers"]
    # The final norm block keeps 3 h-sized tensors (counted with the head, not the layers).
    final = 3 * 4 * CPU_MODEL["hidden_size"] * tokens
    return {"saved_bytes_per_token_per_layer": (sum(layer_sizes.values()) - final) / tokens / layers}


def measure_step() -> dict:
    from tandem.sample import Sample
    from tandem.trainer.megatron_backend import MegatronTrainer

    trainer = MegatronTrainer(cpu_config(tempfile.mkdtemp()))
    g = torch.Generator().manual_seed(0)
    n = CPU_SEQ - 8
    samples = [Sample(prompt_ids=torch.randint(0, 256, (8,), generator=g).tolist(),
                      response_ids=torch.randint(0, 256, (n,), generator=g).tolist(), loss_mask=[1] * n,
                      rollout_logprobs=[-1.0] * n, advantage=1.0 - 2 * (i % 2), group_id=i // 2)
               for i in range(CPU_BATCH)]
    trainer.train_step(samples)  # the optimizer state exists from here on
    out = measure_layers(trainer)
    grads = 4 * sum(p.numel() for p in trainer.model.parameters())  # allocated again in each backward
    out["step_peak_bytes"] = peak_above_now(lambda: trainer.train_step(samples))
    out["grad_bytes"] = grads
    return out


def measure_head(kind: str) -> dict:
    """Peak bytes per logit element of the loss head as MegatronTrainStep runs it (megatron_head.LossHead: log-probs
    with grad, the entropy metric without), forward and backward. kind: loss_tp1 / loss_vp (the whole
    micro-batch's logits) or chunk_tp1 / chunk_vp (chunks of CHUNK positions from hidden states)."""
    from tandem import losses
    from tandem.config import MegatronSettings
    from tandem.trainer.megatron_dist import init_parallel
    from tandem.trainer.megatron_head import LossHead

    init_parallel(MegatronSettings(tensor_parallel=1), 0)  # a TP group of one runs the TP > 1 code
    head = LossHead(2 if kind.endswith("vp") else 1, LOSS_VOCAB, 1.0, 0)  # tp > 1 selects the vocab-parallel code
    targets = torch.randint(0, LOSS_VOCAB, (1, LOSS_TOKENS))
    if kind.startswith("loss"):
        logits = torch.randn(1, LOSS_TOKENS + 1, LOSS_VOCAB, requires_grad=True)

        def forward_backward():
            logp, _ = head.scores(None, logits, targets, with_entropy=True, entropy_grad=False)
            logp.sum().backward()

        # + 4: the fp32 logits themselves, resident before the measurement starts.
        return {"bytes_per_logit": peak_above_now(forward_backward) / (LOSS_TOKENS * LOSS_VOCAB) + 4}
    hidden = torch.randn(1, LOSS_TOKENS, CHUNK_HIDDEN, requires_grad=True)
    weight = torch.randn(LOSS_VOCAB, CHUNK_HIDDEN, requires_grad=True)

    def chunked_forward_backward():
        logp, _ = losses.chunked_scores(hidden, lambda rows: rows @ weight.t(), targets, CHUNK, head.logp,
                                        head.entropy)
        logp.sum().backward()

    # Less the gradients the backward allocates for the hidden states and the weight (not the head's logits).
    grads = 4 * (LOSS_TOKENS + LOSS_VOCAB) * CHUNK_HIDDEN
    return {"bytes_per_chunk_logit": (peak_above_now(chunked_forward_backward) - grads) / (CHUNK * LOSS_VOCAB)}


MOE = {"experts": 16, "top_k": 4, "expert_ffn": 128}
"""The MoE layer measured: CPU_MODEL's attention with 16 experts of width 128, top-4."""


def moe_cuda_stand_ins() -> None:
    """What megatron-core 0.16.1's MoE layer needs beyond tandem's CPU shim, for this measurement only: its alltoall
    dispatcher makes a CUDA stream at construction (synchronous here), and its router's gating linear names
    Transformer Engine's GEMM even when Transformer Engine is absent (None selects its torch.mm path)."""
    import contextlib

    from megatron.core.transformer.moe import moe_utils

    from tandem.trainer import megatron_cpu_shim as shim

    torch.cuda.Stream = lambda *a, **k: shim._SyncStream()  # type: ignore[assignment]
    torch.cuda.current_stream = lambda *a, **k: shim._SyncStream()  # type: ignore[assignment]
    torch.cuda.stream = lambda s: contextlib.nullcontext()  # type: ignore[assignment]
    if not hasattr(moe_utils, "te_general_gemm"):
        moe_utils.te_general_gemm = None


def measure_moe_layer() -> dict:
    """Bytes per token one megatron-core layer saves for backward, dense and MoE (SequentialMLP experts, the
    alltoall dispatcher, EP 1, fp32 router), tandem's local spec and SDPA attention, fp32, one process."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.spec_utils import build_module
    from megatron.core.transformer.transformer_config import TransformerConfig

    from tandem.config import MegatronSettings
    from tandem.trainer.megatron_dist import init_parallel
    from tandem.trainer.megatron_model import _sdpa_core_attention_cls

    init_parallel(MegatronSettings(tensor_parallel=1), 0)
    moe_cuda_stand_ins()
    m, tokens = CPU_MODEL, CPU_SEQ
    out = {}
    for kind, extra in (("dense", {}), ("moe", {
            "num_moe_experts": MOE["experts"], "moe_router_topk": MOE["top_k"], "moe_ffn_hidden_size": MOE["expert_ffn"],
            "moe_grouped_gemm": False, "moe_router_dtype": "fp32"})):
        cfg = TransformerConfig(
            num_layers=1, hidden_size=m["hidden_size"], num_attention_heads=m["num_heads"],
            num_query_groups=m["num_kv_heads"], kv_channels=m["head_dim"], ffn_hidden_size=m["intermediate_size"],
            gated_linear_unit=True, activation_func=torch.nn.functional.silu, normalization="RMSNorm",
            add_bias_linear=False, qk_layernorm=True, hidden_dropout=0.0, attention_dropout=0.0,
            bias_dropout_fusion=False, apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
            gradient_accumulation_fusion=False, use_cpu_initialization=True, variable_seq_lengths=True,
            moe_token_dispatcher_type="alltoall", **extra)
        spec = get_gpt_layer_local_spec(num_experts=extra.get("num_moe_experts"), moe_grouped_gemm=False,
                                        qk_layernorm=True, normalization="RMSNorm")
        spec.submodules.self_attention.submodules.core_attention = _sdpa_core_attention_cls()
        layer = build_module(spec, config=cfg, layer_number=1)
        rope = RotaryEmbedding(kv_channels=m["head_dim"], rotary_percent=1.0, rotary_base=10000)(tokens)
        x = torch.randn(tokens, 1, m["hidden_size"], requires_grad=True)
        skip = {p.untyped_storage().data_ptr() for p in layer.parameters()} | {x.untyped_storage().data_ptr()}
        sizes: dict[int, int] = {}

        def pack(t):
            if t.untyped_storage().data_ptr() not in skip:
                sizes.setdefault(t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            layer(x, attention_mask=None, rotary_pos_emb=rope)
        out[kind] = sum(sizes.values()) / tokens
    return out


def child(kind: str) -> None:
    torch.set_num_threads(2)
    import warnings

    warnings.filterwarnings("ignore")
    result = measure_step() if kind == "step" else measure_moe_layer() if kind == "moe" else measure_head(kind)
    print("RESULT " + json.dumps(result))


def run_child(kind: str) -> dict:
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="65536", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, __file__, "--child", kind], env=env, capture_output=True, text=True,
                         timeout=900, check=True).stdout
    return json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[7:])


# --------------------------------------------------------------------------- the planner's side
def cpu_checks() -> list[dict]:
    """The CPU measurements next to the planner's figures for the same shape (fp32: 4-byte activations)."""
    shape = tiny_shape(cpu_config(tempfile.mkdtemp()).model.tiny)
    fp32 = replace(mem.TANDEM_MEGATRON, act_bytes=4)
    step, tp1, vp = run_child("step"), run_child("loss_tp1"), run_child("loss_vp")
    chunk_tp1, chunk_vp = run_child("chunk_tp1"), run_child("chunk_vp")
    moe = run_child("moe")
    moe_shape = replace(shape, experts=MOE["experts"], experts_per_token=MOE["top_k"], expert_ffn=MOE["expert_ffn"])
    acts = mem.stage_activations(shape, fp32, tokens=CPU_BATCH * CPU_SEQ, tp=1, pp=1, stage=0, recompute=False)
    return [
        {"what": "activation bytes per token per layer (saved tensors)", "measured": step["saved_bytes_per_token_per_layer"],
         "planner": mem.layer_bytes_per_token(shape, fp32, 1)},
        {"what": "loss peak, bytes per logit element, TP = 1 (tandem.losses)", "measured": tp1["bytes_per_logit"],
         "planner": fp32.logit_bytes_tp1},
        {"what": "loss peak, bytes per logit element, TP > 1 (vocab_parallel_logprobs + vocab_parallel_entropy)",
         "measured": vp["bytes_per_logit"], "planner": fp32.logit_bytes_tp},
        {"what": f"chunked head peak, bytes per element of one {CHUNK}-token chunk's logits, TP = 1",
         "measured": chunk_tp1["bytes_per_chunk_logit"], "planner": fp32.chunk_logit_bytes_tp1},
        {"what": f"chunked head peak, bytes per element of one {CHUNK}-token chunk's logits, TP > 1",
         "measured": chunk_vp["bytes_per_chunk_logit"], "planner": fp32.chunk_logit_bytes_tp},
        {"what": (f"an MoE layer's activation bytes per token less a dense layer's (saved tensors; {MOE['experts']} "
                  f"experts of width {MOE['expert_ffn']}, top-{MOE['top_k']}, alltoall, fp32 router; dense MLP "
                  f"{CPU_MODEL['intermediate_size']})"), "measured": moe["moe"] - moe["dense"],
         "planner": mem.moe_layer_bytes_per_token(moe_shape, fp32) - mem.layer_bytes_per_token(moe_shape, fp32, 1)},
        {"what": f"train step peak above the step before, bytes (includes up to {step['grad_bytes']:,} of grads)",
         "measured": step["step_peak_bytes"], "planner": acts.total},
    ]


FEATURES_OFF = ["--trainer.logprob_chunk_tokens", "0", "--trainer.max_tokens_per_micro_batch", "0",
                "--trainer.megatron.optimizer_cpu_offload", "false", "--trainer.megatron.precision_aware_optimizer",
                "false"]


def verdict_grid() -> list[dict]:
    rows = []
    for config in ("configs/node_qwen3_14b.toml", "configs/node_qwen3_4b.toml"):
        for features, tp, recompute in [(True, 4, True), *((False, t, r) for t in (2, 4) for r in (False, True))]:
            cfg = load_config(["--config", str(ROOT / config), *([] if features else FEATURES_OFF),
                               "--trainer.megatron.tensor_parallel", str(tp),
                               "--trainer.megatron.recompute", str(recompute).lower()])
            shape = load_shape(cfg.model)
            plan = plan_node(cfg, shape, 80 * mem.GIB)
            rank, setting = plan.rank, plan.trainer
            assert rank is not None and setting is not None
            rows.append({"config": config, "features": features, "tp": tp, "dp": setting.dp, "recompute": recompute,
                         "state_gib": rank.state.total / mem.GIB, "activations_gib": rank.activations.total / mem.GIB,
                         "total_gib": rank.total / mem.GIB, "budget_gib": plan.trainer_budget / mem.GIB,
                         "fits": plan.trainer_fits,
                         "longest_fitting_seq": longest_fitting_seq(shape, setting, plan.trainer_budget)})
    return rows


NOTES = """
Notes:
- Megatron-LM: commit f5590597c4bcbbef56fc55321c3279c84d96d56f; the same golden values stand unchanged from
  adc69dba2d (2025-10-21) to d98e8a64dd (2026-08). The config's `--vocab-size 131072` with the NullTokenizer is
  131,073 tokens (the EOD id is added), padded to 131,584 for TP 4. The planner models Transformer Engine's stack
  there (tandem.lab.plan.memory.MEGATRON_TE); its 6 bytes per logit element is read from Megatron's fused
  vocab-parallel cross entropy, not measured (4 or 12 instead would move the peak by -2% / +6%).
- SGLang: the log's "avail mem=63.48 GB, mem usage=15.11 GB" after loading puts 78.6 GiB free before loading (an
  80 GB card); the 1.3 GiB device reserve the planner keeps comes from such logs (without it: +2.6%).
- ZeRO: arithmetic of the sharding only (16 and 4 + 12/64 bytes per parameter with fp16 gradients).
- Liger-Kernel: both rows come from one benchmark run (both heads are built in it, and the weight's gradient is
  not zeroed between its 10 iterations: the estimate counts those resident tensors, see tandem.lab.plan.published).
  The planner's head term takes each implementation's bytes per logit element (torch's bf16 cross entropy 6,
  Liger's chunk 6) from their code, not from the measurement.
- Megatron-Bridge: the doc reports the saving in "GB"; read as GiB the error would be -7.1%. Its saving is linear
  in the fraction (3.8 GB per 25%), as the planner's term is. The flags it lists do not include the
  precision-aware optimizer: the distributed optimizer's fp32 master stays on the GPU, Adam's moments leave.
- CPU rows: tandem's Megatron stack (megatron-core local spec, torch RMSNorm, tandem's SDPA wrapper) in fp32 at
  TP = 1; the loss rows run the TP > 1 code on a TP group of one. Peaks are resident-set peaks (VmHWM). The
  chunked-head rows are less the gradients the backward allocates for the hidden states and the weight; on a GPU
  in bf16 the planner adds 2 bytes per chunk element for the bf16 matmul output beside its fp32 copy.
"""


def markdown(published: list[dict], cpu: list[dict], grid: list[dict]) -> str:
    lines = ["# tandem.lab.plan against published figures", "",
             "Written by `python bench/plan_validation.py`; formulas in docs/plan.md. Error = planner / published - 1.",
             "", "| configuration | quantity | published | source | planner | error |", "|---|---|---|---|---|---|"]
    for r in published:
        digits = 1 if r["unit"] == "GB" else 0
        lines.append(f"| {r['config']} | {r['quantity']} | {r['published']:,} {r['unit']} | {r['source']} | "
                     f"{r['planner']:,.{digits}f} {r['unit']} | {r['error'] * 100:+.2f}% |")
    if cpu:
        lines += ["", "## tandem's own Megatron stack, measured on CPU (fp32, TP = 1)", "",
                  "| quantity | measured | planner | planner / measured - 1 |", "|---|---|---|---|"]
        lines += [f"| {r['what']} | {r['measured']:,.1f} | {r['planner']:,} | {r['planner'] / r['measured'] - 1:+.2%} |"
                  for r in cpu]
    lines += ["", "## Qwen3 on the reference node: trainer on 4 x 80 GB (per rank, GiB; budget = 80 - 1.3 - 2)", "",
              "Memory features: as the config ships them (chunked loss head, packed micro-batches, and for the 14B "
              "half of the optimizer offloaded), or all off.", "",
              ("| config | memory features | TP x DP | recompute | weights+grads+optimizer | activations | total | fits | "
               "longest micro-batch sequence that fits there (tokens, of 32,768) |"), "|---|---|---|---|---|---|---|---|---|"]
    for r in grid:
        longest = f"{r['longest_fitting_seq']:,}"
        lines.append(f"| {r['config']} | {'as shipped' if r['features'] else 'off'} | {r['tp']} x {r['dp']} | "
                     f"{'on' if r['recompute'] else 'off'} | "
                     f"{r['state_gib']:.1f} | {r['activations_gib']:.1f} | {r['total_gib']:.1f} | "
                     f"{'yes' if r['fits'] else 'no'} | {longest} |")
    return "\n".join(lines) + "\n" + NOTES


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--no-cpu", action="store_true", help="skip the CPU measurements of tandem's stack")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(args.child)
        return
    published = [{"key": c.key, "config": c.config, "quantity": c.quantity, "published": c.published, "unit": c.unit,
                  "source": c.source, "planner": c.estimate(), "error": c.error} for c in CASES]
    cpu = [] if args.no_cpu else cpu_checks()
    grid = verdict_grid()
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "plan_validation.json").write_text(json.dumps({"published": published, "cpu": cpu, "qwen3": grid},
                                                             indent=2) + "\n")
    (RESULTS / "plan_validation.md").write_text(markdown(published, cpu, grid))
    print(markdown(published, cpu, grid))


if __name__ == "__main__":
    main()
