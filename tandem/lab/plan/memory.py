"""The byte arithmetic: training state, activations and an engine's KV cache, per GPU rank.

Training state (Megatron mixed precision; Megatron-LM megatron/training/theoretical_memory_usage.py
counts 18 bytes per parameter, or 6 + 12/DP with the distributed optimizer):
    weights     2 B/param (bf16 copy used by forward/backward; 4 B when training in fp32)
    grads       4 B/param (DDP's fp32 grad buffer: grad_reduce_in_fp32), 2 with bf16 main grads
    optimizer   fp32 master weights 4 B (bf16 only) + Adam m and v 8 B, / DP with the
                distributed optimizer
Only trainable parameters have grads and optimizer state (LoRA: the adapters).
Optimizer CPU offload (megatron-core's HybridDeviceOptimizer, fraction f of the parameters, read
from megatron/core/optimizer/cpu_offloading/hybrid_optimizer.py and distrib_optimizer.py, 0.16.1):
    GPU   the rest's fp32 copy and moments (1 - f)(4 + 8), and, without the precision-aware
          optimizer, the distributed optimizer's own fp32 master of every parameter (4 f more)
    host  per offloaded parameter: its fp32 copy, m, v and a pinned fp32 gradient, 16 B
          (pinned memory, not on the GPU; / DP like the GPU part)

Activations kept for backward, bytes per token of one layer (a = activation bytes, 2 in bf16;
h, q, kv, f as in tandem.lab.plan.shape; t = TP). Korthikanti et al. 2022 ("Reducing Activation
Recomputation in Large Transformer Models", Table 2) count sbh(34 + 5as/h) for a GPT layer: the
5as/h softmax term is gone with flash-style attention, and without sequence parallelism the
norm regions are whole on every TP rank ("10sbh" in the paper). Counted per saved tensor:
    norm blocks (x2)   norm_copies x a.h each, whole on every TP rank
    dropout masks      2 x 1.h, whole (only stacks that train with dropout)
    q/k norms          a.(3q + 3kv) / t: q's input (a copy) and its normalized tensor, the
                       fused qkv output (k's input is a view of it) and k's normalized tensor
    attention          a.(q + 2.kv' + q) / t: Q, K, V and the output (which is linear_proj's
                       input); kv' = q when K and V are expanded to every query head
    MLP                a.(copies.f) / t: SwiGLU 5f = gated_mlp_copies (fc1's [gate; up] output
                       2f, silu, the up half plus glu_linear_offset, their product); GeLU 2f
An MoE layer (megatron-core's MoE layer with SequentialMLP experts and the alltoall dispatcher, TP 1,
no auxiliary loss: megatron-core's default coefficient 0) keeps, in place of the MLP, per token
(k experts per token, fe their width, E experts, r the router dtype's bytes):
    dispatched tokens  a.k.h: the permuted [tokens x k, h] buffer the experts' fc1 saves (once: the
                       combine's all-to-all, unsort and unpermute save nothing of that size)
    experts            a.k.(copies + 1).fe: each expert a gated MLP over its tokens, plus the
                       probability-weighted product (the experts apply the gates: one copy more)
    router             8k + 8k (the top-k indices and the dispatcher's sorted indices, int64) + 4k (the
                       fp32 softmax over the top-k) + r.(E + k) (the [tokens, E] probabilities and
                       the permuted ones) + E (the boolean routing map)
With expert parallelism the dispatched tokens a rank's experts see average tokens x k when the
router balances the experts (the planner's count; an unbalanced step holds more). Measured on CPU
with saved-tensor hooks (bench/plan_validation.py's method), exact in fp32 and bf16. The torch
trainer's MoE layers are approximated by the same count.
Full recompute (Megatron "full"/"uniform", one layer per checkpoint) keeps a.h per layer (the
layer's input, whole without sequence parallelism) plus one layer's full set while it is
recomputed, which never coincides with the loss's logits (freed before the backward reaches the
last layer): the peak takes the larger of the two. The last pipeline stage adds the final
norm's norm_copies x a.h and the logits: logit_bytes per element of [tokens, V_padded / t]
(tandem: 16 at TP = 1, 28 at TP > 1, where the vocab-parallel log-prob and the no-grad entropy
metric make several fp32 copies). With the chunked head (trainer.logprob_chunk_tokens = c) only
one chunk's logits exist at a time: chunk_logit_bytes per element of [min(c, tokens), V_padded / t]
(forward, and the chunk's recompute and backward), plus 2 in bf16 for the matmul's own bf16
output beside its fp32 copy. Per-token fp32 statistics (rstd, logsumexp, the chunks' log-probs)
are left out (< 0.1%). With pipeline parallelism, stage k of 1F1B holds PP - k micro-batches in
flight. A packed micro-batch (trainer.max_tokens_per_micro_batch) holds max(budget, longest
sample) tokens: attention is per sample, so the count per token is the padded one's.

The counts for tandem's stack (TANDEM_MEGATRON) were read from the saved tensors of its
Megatron model and loss on CPU (bench/plan_validation.py); MEGATRON_TE is Megatron-LM's
Transformer Engine stack as its functional tests run it (tandem.lab.plan.published).

Engine (SGLang, ModelRunnerKVCacheMixin.profile_max_num_token): KV pool = mem_fraction_static x
(memory free before loading) - weights; bytes per token = 2 (K and V) x layers x kv_heads x
head_dim x dtype bytes / tp; tokens = pool / bytes per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from tandem.lab.plan.shape import ModelShape

GIB = 1 << 30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
DEVICE_RESERVE = int(1.3 * GIB)
"""Of a GPU's nominal size, what no process can allocate: an '80 GB' H100 reports 79.2 GiB to
CUDA and a fresh process's context takes ~0.5 GiB more (SGLang logs "avail mem=78.6-78.8 GB"
before loading weights on 80 GiB H100s)."""
TRAINER_RUNTIME_RESERVE = 2 * GIB
"""Trainer memory the allocator's peak does not show: NCCL buffers, cuBLAS workspaces, caching
allocator fragmentation. An allowance, not a measurement."""


@dataclass(frozen=True)
class ActivationKernels:
    """How a training stack stores activations for backward (module docstring)."""

    act_bytes: int = 2
    norm_copies: int = 3
    """h-sized tensors kept per norm block, the next linear's input included (torch RMSNorm keeps
    its input and the normalized tensor: 3; Transformer Engine's fused LayerNorm-linear: 2)."""
    repeat_kv: bool = True
    """K and V expanded to every query head before attention (tandem's SDPA wrapper)."""
    gated_mlp_copies: int = 5
    dropout: bool = False
    logit_bytes_tp1: int = 16
    """Bytes per logit element at the loss's peak with TP = 1 (tandem.losses on fp32 logits)."""
    logit_bytes_tp: int = 28
    """... with TP > 1 (megatron_head.vocab_parallel_logprobs plus the no-grad vocab_parallel_entropy)."""
    chunk_logit_bytes_tp1: int = 18
    """Bytes per element of one chunk's logits at the chunked head's peak, TP = 1 (losses.chunked_scores)."""
    chunk_logit_bytes_tp: int = 22
    """... with TP > 1 (megatron_head: vocab_parallel_logprobs and vocab_parallel_entropy per chunk)."""
    router_bytes: int = 4
    """Bytes of the router's probabilities (fp32: moe_router_dtype = 'fp32', as the peers train MoE)."""


TANDEM_MEGATRON = ActivationKernels()
MEGATRON_TE = ActivationKernels(norm_copies=2, repeat_kv=False, dropout=True, logit_bytes_tp1=6,
                                logit_bytes_tp=6, chunk_logit_bytes_tp1=6, chunk_logit_bytes_tp=6)
"""Megatron-LM with Transformer Engine: fused LayerNorm-linear, native-GQA fused attention,
dropout 0.1, fused vocab-parallel cross entropy (fp32 softmax over the bf16 logits)."""


@dataclass(frozen=True)
class TrainingState:
    weights: int
    grads: int
    optimizer: int
    """On the GPU."""
    host: int = 0
    """Pinned host memory of the offloaded optimizer (not on the GPU; not in `total`)."""

    @property
    def total(self) -> int:
        return self.weights + self.grads + self.optimizer


def optimizer_bytes(trainable: int, dp: int, *, bf16: bool = True, distributed: bool = True,
                    offload_fraction: float = 0.0, precision_aware: bool = False) -> tuple[int, int]:
    """(GPU bytes, pinned host bytes) of the optimizer of one rank holding `trainable` parameters."""
    master = 4 if bf16 else 0  # fp32 master copy (mixed precision only); Adam's m and v are 8
    offloaded = offload_fraction if offload_fraction > 0 else 0.0
    # HybridDeviceOptimizer keeps the GPU part's fp32 copy itself; the distributed optimizer's own
    # master copy goes away only with the precision-aware optimizer.
    gpu_per_param = (1 - offloaded) * (master + 8) + (0 if precision_aware else master * offloaded)
    host_per_param = 16 * offloaded
    shard = dp if distributed else 1  # sharded over DP (rounded up, like Megatron's buckets)
    return math.ceil(trainable * gpu_per_param / shard), math.ceil(trainable * host_per_param / shard)


def training_state(params: int, trainable: int, dp: int, *, bf16: bool = True, distributed: bool = True,
                   grad_bytes: int = 4, offload_fraction: float = 0.0, precision_aware: bool = False) -> TrainingState:
    """Bytes of weights, grads and optimizer state on one rank holding `params` parameters."""
    gpu, host = optimizer_bytes(trainable, dp, bf16=bf16, distributed=distributed,
                                offload_fraction=offload_fraction, precision_aware=precision_aware)
    return TrainingState(weights=params * (2 if bf16 else 4), grads=trainable * grad_bytes, optimizer=gpu, host=host)


def mlp_bytes_per_token(shape: ModelShape, k: ActivationKernels) -> int:
    """A dense MLP's activation bytes per token, before TP splits them."""
    return k.act_bytes * shape.ffn * (k.gated_mlp_copies if shape.gated else 2)


def layer_bytes_per_token(shape: ModelShape, k: ActivationKernels, tp: int) -> int:
    """Activation bytes one dense layer keeps per token on one TP rank (module docstring)."""
    a, h, q, kv = k.act_bytes, shape.hidden, shape.q_dim, shape.kv_dim
    whole = 2 * k.norm_copies * a * h + (2 * h if k.dropout else 0)
    qk_norm = a * (3 * q + 3 * kv) if shape.qk_norm else 0
    attention = a * (2 * q + 2 * (q if k.repeat_kv else kv))
    return whole + (qk_norm + attention + mlp_bytes_per_token(shape, k)) // tp


def dispatch_bytes_per_token(shape: ModelShape, k: ActivationKernels) -> int:
    """The alltoall dispatcher's permuted tokens one MoE layer keeps per token (module docstring)."""
    return k.act_bytes * shape.experts_per_token * shape.hidden


def router_bytes_per_token(shape: ModelShape, k: ActivationKernels) -> int:
    """The router's indices, probabilities and routing map one MoE layer keeps per token (module docstring)."""
    top = shape.experts_per_token
    return 20 * top + k.router_bytes * (shape.experts + top) + shape.experts


def moe_layer_bytes_per_token(shape: ModelShape, k: ActivationKernels) -> int:
    """Activation bytes one MoE layer keeps per token (TP 1): a dense layer's without its MLP, plus the
    dispatched tokens, the k experts' MLPs and the router (module docstring)."""
    experts = k.act_bytes * shape.experts_per_token * (k.gated_mlp_copies + 1) * shape.expert_ffn
    return (layer_bytes_per_token(shape, k, 1) - mlp_bytes_per_token(shape, k) + experts
            + dispatch_bytes_per_token(shape, k) + router_bytes_per_token(shape, k))


def logit_bytes_per_token(shape: ModelShape, k: ActivationKernels, tp: int) -> int:
    per_element = k.logit_bytes_tp1 if tp == 1 else k.logit_bytes_tp
    return per_element * shape.padded_vocab(tp) // tp


def head_bytes(shape: ModelShape, k: ActivationKernels, *, tokens: int, tp: int, chunk: int = 0) -> int:
    """The last stage's final norm and loss head for a micro-batch of `tokens` tokens (module docstring)."""
    norm = tokens * k.norm_copies * k.act_bytes * shape.hidden
    if chunk <= 0:
        return norm + tokens * logit_bytes_per_token(shape, k, tp)
    per_element = (k.chunk_logit_bytes_tp1 if tp == 1 else k.chunk_logit_bytes_tp) + (2 if k.act_bytes == 2 else 0)
    return norm + min(chunk, tokens) * per_element * (shape.padded_vocab(tp) // tp)


@dataclass(frozen=True)
class Activations:
    layers: int
    """Kept by the transformer layers (all micro-batches in flight)."""
    recompute_working_set: int
    """One layer recomputed in the backward (full recompute only)."""
    embedding: int
    head: int
    """Final norm and logits at the loss (last pipeline stage only)."""
    router: int = 0
    """Of `layers` (with recompute: of `recompute_working_set`): the MoE layers' router tensors."""
    dispatched: int = 0
    """Of the same: the MoE layers' dispatched (permuted) tokens."""

    @property
    def total(self) -> int:
        # The loss's logits are freed before the backward reaches (and recomputes) the last layer.
        return self.layers + self.embedding + max(self.head, self.recompute_working_set)


def stage_activations(shape: ModelShape, k: ActivationKernels, *, tokens: int, tp: int, pp: int, stage: int,
                      recompute: bool, logit_chunk: int = 0) -> Activations:
    """Activation bytes of one rank of pipeline stage `stage` for micro-batches of `tokens` tokens."""
    in_flight = pp - stage  # 1F1B: the first stage holds PP micro-batches, the last one
    layers = shape.layers // pp
    moe = shape.stage_moe_layers(pp, stage)
    per_layer = [layer_bytes_per_token(shape, k, tp)] * (layers - moe)
    per_layer += [moe_layer_bytes_per_token(shape, k)] * moe
    # The MoE layers' router and dispatched tokens among them: every one in flight, or with recompute the
    # one layer being recomputed when that (the largest) is an MoE layer.
    routed = in_flight * moe
    if recompute:
        kept = in_flight * layers * tokens * k.act_bytes * shape.hidden
        working = tokens * max(per_layer, default=0)
        routed = 1 if moe and per_layer[-1] == max(per_layer) else 0
    else:
        kept, working = in_flight * tokens * sum(per_layer), 0
    router = routed * tokens * router_bytes_per_token(shape, k)
    dispatched = routed * tokens * dispatch_bytes_per_token(shape, k)
    embedding = in_flight * tokens * shape.hidden if (stage == 0 and k.dropout) else 0  # dropout mask
    head = head_bytes(shape, k, tokens=tokens, tp=tp, chunk=logit_chunk) if stage == pp - 1 else 0
    return Activations(layers=kept, recompute_working_set=working, embedding=embedding, head=head,
                       router=router, dispatched=dispatched)


# --------------------------------------------------------------------------- engines
def kv_bytes_per_token(shape: ModelShape, dtype_bytes: int = 2, tp: int = 1) -> int:
    """K and V of every layer for one token, on one engine TP rank."""
    return 2 * shape.layers * shape.kv_heads * shape.head_dim * dtype_bytes // tp


@dataclass(frozen=True)
class EngineMemory:
    weights: int
    kv_pool: int
    kv_bytes_per_token: int

    @property
    def kv_tokens(self) -> int:
        return max(self.kv_pool, 0) // self.kv_bytes_per_token


def sglang_memory(shape: ModelShape, gpu_bytes: int, mem_fraction_static: float, *, dtype_bytes: int = 2,
                  tp: int = 1) -> EngineMemory:
    """SGLang's KV pool: the static fraction of what the process can use, less the weights."""
    weights = shape.total_params() * dtype_bytes // tp
    pool = int(mem_fraction_static * (gpu_bytes - DEVICE_RESERVE)) - weights
    return EngineMemory(weights=weights, kv_pool=pool, kv_bytes_per_token=kv_bytes_per_token(shape, dtype_bytes, tp))
