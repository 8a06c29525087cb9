"""A memory and fit planner: `python -m tandem.lab.plan --config node.toml`.

From the model's HF config (no weights) it estimates, per GPU rank, the trainer's weights,
grads and optimizer state (TP, PP, DP, dtype, distributed optimizer, the optimizer offloaded to
the CPU, LoRA), its activations (micro-batch padded or packed, sequence length, recompute, the
loss head whole or chunked) and each engine's weights and KV-cache budget at
engine.sglang.mem_fraction_static, then says fit or no fit against the GPU memory and the smallest
change that fits (loss-head chunks, TP or EP, recompute, micro-batch, optimizer offload). Exit status
0 fits, 1 does not, 2 bad input.

The modules: shape (the model's shape and parameter counts), memory (the byte formulas),
layout (the trainer's setting and the layouts refused), planner (config -> plan, verdict, smallest
change), report (text and JSON), published (the published figures the formulas are checked against). docs/plan.md derives every formula and
bench/results/plan_validation.md compares them with the published numbers.
"""

from tandem.lab.plan.memory import (GIB, MEGATRON_TE, TANDEM_MEGATRON, ActivationKernels, head_bytes, kv_bytes_per_token,
                                layer_bytes_per_token, optimizer_bytes, sglang_memory, stage_activations,
                                training_state)
from tandem.lab.plan.planner import NodePlan, TrainerSetting, plan_node, trainer_memory
from tandem.lab.plan.shape import ModelShape, PlanError, load_shape, shape_from_hf

__all__ = [
    "GIB", "MEGATRON_TE", "TANDEM_MEGATRON", "ActivationKernels", "ModelShape", "NodePlan", "PlanError",
    "TrainerSetting", "head_bytes", "kv_bytes_per_token", "layer_bytes_per_token", "load_shape", "optimizer_bytes",
    "plan_node", "sglang_memory", "shape_from_hf", "stage_activations", "trainer_memory", "training_state",
]
