"""Published memory figures, and the planner's estimate of each from the same configuration.

tests/test_plan.py checks every estimate against its figure (within 15%);
bench/plan_validation.py writes the table in bench/results/plan_validation.md. Each case names
its source exactly; the shape and settings come from that source, not from fitting.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from tandem.plan import memory as mem
from tandem.plan.shape import ModelShape, bundled_config, shape_from_hf

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
]
