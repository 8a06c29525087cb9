"""Published memory figures, and the planner's estimate of each from the same configuration.

tests/test_plan.py checks every estimate against its figure (within 15%);
bench/plan_validation.py writes the table in bench/results/plan_validation.md. Each case names
its source exactly; the shape and settings come from that source, not from fitting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tandem.lab.plan import memory as mem
from tandem.lab.plan.memory import ActivationKernels
from tandem.lab.plan.shape import ModelShape, bundled_config, shape_from_hf

MEGATRON_COMMIT = "f5590597c4bcbbef56fc55321c3279c84d96d56f"
MEGATRON_TEST = "tests/functional_tests/test_cases/gpt/gpt3_7b_tp4_pp1_memory_speed"

GPT_7B = ModelShape(
    name="Megatron-LM gpt3_7b (functional test)", layers=32, hidden=4096, heads=32, kv_heads=8, head_dim=128,
    ffn=4 * 4096, vocab=131072 + 1, tied=False, gated=False, layer_norm=True, linear_bias=True,
    positions=8192, max_positions=8192)
"""model_config.yaml: --num-layers 32 --hidden-size 4096 --num-attention-heads 32 --num-query-groups 8
--untie-embeddings-and-output-weights --seq-length 8192 --max-position-embeddings 8192
--tokenizer-type NullTokenizer --vocab-size 131072 (the NullTokenizer adds an EOD token: 131073);
Megatron's defaults: ffn 4h, GeLU, LayerNorm, biases on, learned absolute positions, dropout 0.1."""
GPT_7B_TP, GPT_7B_DP, GPT_7B_TOKENS = 4, 2, 2 * 8192  # TP 4 on 1 node x 8 GPUs; micro-batch 2 x 8192


@dataclass(frozen=True)
class PublishedCase:
    key: str
    config: str
    quantity: str
    published: float
    unit: str
    source: str
    estimate: Callable[[], float]

    @property
    def error(self) -> float:
        """(estimate - published) / published."""
        return self.estimate() / self.published - 1.0


def gpt_7b_static() -> int:
    params = GPT_7B.rank_params(GPT_7B_TP, 1, 0)
    return mem.training_state(params, params, GPT_7B_DP, bf16=True, distributed=True).total


def gpt_7b_peak() -> int:
    acts = mem.stage_activations(GPT_7B, mem.MEGATRON_TE, tokens=GPT_7B_TOKENS, tp=GPT_7B_TP, pp=1, stage=0,
                                 recompute=False)
    return gpt_7b_static() + acts.total


def llama_8b_kv_tokens() -> int:
    name = "meta-llama/Llama-3.1-8B-Instruct"
    shape = shape_from_hf(bundled_config(name) or {}, name)
    return mem.sglang_memory(shape, 80 * mem.GIB, 0.88).kv_tokens


def zero_baseline_gb() -> float:
    psi = 7_500_000_000
    return mem.training_state(psi, psi, 64, distributed=False, grad_bytes=2).total / 1e9


def zero_os_gb() -> float:
    psi = 7_500_000_000
    return mem.training_state(psi, psi, 64, distributed=True, grad_bytes=2).total / 1e9


# --------------------------------------------------------------------------- the loss head (chunked and whole)
LIGER_COMMIT = "b5672a153b7b314a367996fc6cd60a57aeda4ccc"
LIGER_SOURCE = (f"linkedin/Liger-Kernel benchmark/data/all_benchmark_data.csv @ {LIGER_COMMIT[:10]} (2024-09-03, "
                "Liger 0.2.1, A100-SXM4-80GB), rows fused_linear_cross_entropy / full / memory; harness: "
                "benchmark/scripts/benchmark_fused_linear_cross_entropy.py and utils._test_memory at that commit")
LIGER_H, LIGER_V, LIGER_TOKENS = 4096, 128256, 32768
LM_HEAD = ModelShape(name="Liger benchmark LM head", layers=0, hidden=LIGER_H, heads=1, kv_heads=1, head_dim=LIGER_H,
                     ffn=0, vocab=LIGER_V, tied=False)
"""The benchmark's H 4096, V 128256 (Llama 3's): 1002 x 128 rows, so no vocab padding."""
LIGER_FLCE = ActivationKernels(act_bytes=2, norm_copies=1, chunk_logit_bytes_tp1=4)
"""Liger's fused linear cross entropy at that commit (ops/fused_linear_cross_entropy.py): a bf16 grad_input
kept for every token (2 B x H: one 'copy' of the hidden size), and per chunk the bf16 logits, their fp32
copy for the kernel and the bf16 scaled gradient, of which the fp32 copy and a bf16 tensor coexist:
4 + 2 B per chunk element (head_bytes adds the bf16 matmul output's 2 to the 4 given here)."""
TORCH_CE = ActivationKernels(act_bytes=2, norm_copies=0, logit_bytes_tp1=6)
"""torch.nn.Linear + CrossEntropyLoss in bf16: log_softmax's bf16 output kept for its backward, the gradient
arriving at it and the one it hands to the logits, 3 x 2 B per logit element at the peak."""


def liger_harness_bytes() -> int:
    """What the benchmark keeps outside the loss: both heads' bf16 weights (it builds the torch and the Liger
    module), the weight's gradient (not zeroed between its 10 timed iterations) and the bf16 input with its
    gradient."""
    weight, tokens = 2 * LIGER_V * LIGER_H, 2 * LIGER_TOKENS * LIGER_H
    return 3 * weight + 2 * tokens


def liger_chunked_peak_mib() -> float:
    inc = -(-LIGER_V // LIGER_H)  # Liger's chunking: the chunk holds ~as many logits as the input has elements
    chunk = 1 << (-(-LIGER_TOKENS // inc) - 1).bit_length()  # triton.next_power_of_2: 1024 positions
    grad_weight = 2 * LIGER_V * LIGER_H  # Liger's own bf16 grad_weight, filled chunk by chunk
    head = mem.head_bytes(LM_HEAD, LIGER_FLCE, tokens=LIGER_TOKENS, tp=1, chunk=chunk)
    return (liger_harness_bytes() + grad_weight + head) / 2**20


def torch_whole_peak_mib() -> float:
    head = mem.head_bytes(LM_HEAD, TORCH_CE, tokens=LIGER_TOKENS, tp=1, chunk=0)
    return (liger_harness_bytes() + head) / 2**20


# --------------------------------------------------------------------------- the optimizer offload
QWEN3_30B_A3B = "Qwen/Qwen3-30B-A3B"
"""Its config.json is bundled (model_configs/): untied, q/k norms, every layer MoE, no shared expert."""
BRIDGE_TP, BRIDGE_PP, BRIDGE_EP, BRIDGE_GPUS = 2, 2, 4, 16
BRIDGE_SOURCE = ("NVIDIA-NeMo/Megatron-Bridge docs/training/cpu-offloading.md @ 6608201d77 (PR #3062), 'Impacted "
                 "Training Dimensions': 15.3 GB saved at 100% optimizer offload (3.8 GB per 25%), Qwen3-30B-A3B "
                 "TP2 PP2 EP4 on 2 x H100 nodes, the optimizer_cpu_offload / offload_fraction / overlap flags")


def qwen3_30b_optimizer_params() -> tuple[int, int]:
    """(dense, expert) parameters with optimizer state on one rank of the last pipeline stage, as the planner
    splits them (ModelShape.rank_dense_params, rank_expert_params). Dense ones are split by TP and sharded over
    DP = 16 / (TP 2 x PP 2) = 4; experts (ETP 1) over expert-DP = 16 / (EP 4 x PP 2) = 2. (Megatron-Bridge
    runs TP 2 with sequence parallelism; tandem's trainer runs MoE at TP 1, but the count is the same.)"""
    shape = shape_from_hf(bundled_config(QWEN3_30B_A3B) or {}, QWEN3_30B_A3B)
    last = BRIDGE_PP - 1
    return (shape.rank_dense_params(BRIDGE_TP, BRIDGE_PP, last),
            shape.rank_expert_params(BRIDGE_PP, last, BRIDGE_EP))


def bridge_offload_saving_gb() -> float:
    """GPU bytes the planner's optimizer term frees when the whole optimizer goes to the CPU (no precision-aware
    optimizer: the distributed optimizer's fp32 master stays on the GPU; Adam's moments leave)."""
    dense, experts = qwen3_30b_optimizer_params()
    dp, expert_dp = BRIDGE_GPUS // (BRIDGE_TP * BRIDGE_PP), BRIDGE_GPUS // (BRIDGE_EP * BRIDGE_PP)

    def gpu(params: int, shards: int, fraction: float) -> int:
        return mem.optimizer_bytes(params, shards, offload_fraction=fraction)[0]

    before = gpu(dense, dp, 0.0) + gpu(experts, expert_dp, 0.0)
    after = gpu(dense, dp, 1.0) + gpu(experts, expert_dp, 1.0)
    return (before - after) / 1e9


MEGATRON_SOURCE = (f"NVIDIA/Megatron-LM {MEGATRON_TEST}/golden_values_dev_dgx_h100.json @ {MEGATRON_COMMIT[:10]} "
                   "(config: model_config.yaml, 1 node x 8 GPUs: tests/test_utils/recipes/gpt.yaml)")

CASES = [
    PublishedCase(
        "megatron_7b_static", "Megatron-LM GPT 7B (GQA 8), TP 4, DP 2, bf16, distributed optimizer, DGX H100",
        "weights + grads + optimizer per rank (mem-allocated-bytes)", 20_663_519_232, "bytes", MEGATRON_SOURCE,
        gpt_7b_static),
    PublishedCase(
        "megatron_7b_peak", "same, micro-batch 2 x 8192 tokens, no recompute, no sequence parallel",
        "peak per rank (mem-max-allocated-bytes)", 57_143_791_616, "bytes", MEGATRON_SOURCE, gpt_7b_peak),
    PublishedCase(
        "sglang_llama_8b_kv", "SGLang, Llama-3.1-8B-Instruct, bf16, TP 1, 80 GB Hopper (FA3), mem_fraction_static 0.88",
        "KV cache capacity (KV Cache is allocated. #tokens)", 442_750, "tokens",
        "sgl-project/sglang PR #4760 (https://github.com/sgl-project/sglang/pull/4760), server log in the "
        "description (FA3: a Hopper GPU; 63.48 + 15.11 = 78.6 GiB free before loading: 80 GB); 0.88 = SGLang's "
        "default at tp_size 1 (python/sglang/srt/server_args.py, 2025)",
        llama_8b_kv_tokens),
    PublishedCase(
        "zero_baseline", "ZeRO: 7.5B parameters, mixed-precision Adam (K = 12), DP 64, fp16 grads",
        "model states per GPU, baseline DP", 120.0, "GB",
        "Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054), Figure 1", zero_baseline_gb),
    PublishedCase(
        "zero_os", "same, optimizer states partitioned (P_os; Megatron's distributed optimizer)",
        "model states per GPU, P_os", 31.4, "GB",
        "Rajbhandari et al. 2020, ZeRO (arXiv:1910.02054), Figure 1", zero_os_gb),
    PublishedCase(
        "liger_chunked_head", "Liger fused linear cross entropy (token chunks of 1,024), 32,768 tokens, H 4096, "
        "V 128256, bf16, forward + backward", "peak (torch.cuda.max_memory_allocated, MiB)", 5794.625, "MiB",
        LIGER_SOURCE, liger_chunked_peak_mib),
    PublishedCase(
        "torch_whole_head", "same, torch Linear + CrossEntropyLoss (the whole [32768, 128256] logits)",
        "peak (torch.cuda.max_memory_allocated, MiB)", 27582.5, "MiB", LIGER_SOURCE, torch_whole_peak_mib),
    PublishedCase(
        "bridge_qwen3_30b_offload", "Megatron-Bridge, Qwen3-30B-A3B, TP 2, PP 2, EP 4, 16 H100s, distributed "
        "optimizer, HybridDeviceOptimizer fraction 1.0", "GPU memory saved per GPU by the offload", 15.3, "GB",
        BRIDGE_SOURCE, bridge_offload_saving_gb),
]
