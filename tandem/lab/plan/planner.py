"""From a TandemConfig to a per-rank memory plan, a verdict, and the smallest change that fits.

The trainer (trainer.backend = 'megatron') is planned per pipeline stage at the configured TP,
PP, DP = trainer.gpus / (TP x PP), micro-batch and recompute; the worst stage is the verdict.
trainer.backend = 'torch' is one GPU holding fp32 master weights, grads and AdamW state
(16 B/param, plus 2 B/param of bf16 autocast copies), its activations approximated by the same
per-layer count at TP = 1. The sequence length of a micro-batch is the longest sample the
config allows: environment.max_context_tokens for a multi-turn environment, else the engines'
context length (engine.sglang.args.context_length, else the model's max_position_embeddings),
which bounds prompt + response of a single-turn sample. `--seq-len` overrides it.

Engines: tandem pins each engine to one GPU (--tp-size 1). 'sglang' engines get SGLang's KV
pool (tandem.lab.plan.memory.sglang_memory); 'embedded' engines hold the weights plus at most
engine.max_total_tokens of KV. An engine fits when its pool holds one full-length request;
it is KV-limited (a warning, not a failure) when the requests it may run at once
(min(engine.max_running_requests, its share of the rollouts in flight)) would not all fit at
full length.

Memory features (trainer.logprob_chunk_tokens, trainer.max_tokens_per_micro_batch, and with
Megatron trainer.megatron.{optimizer_cpu_offload, optimizer_offload_fraction,
precision_aware_optimizer, main_grads_dtype}) enter through tandem.lab.plan.memory. A packed
micro-batch holds max(budget, longest sample) tokens. Context parallelism is not a knob: this
stack cannot run it (megatron-core 0.16.1 implements it only with Transformer Engine).

Mixture-of-experts models on Megatron (trainer.megatron.expert_parallel = EP, TP 1, expert TP 1):
each rank holds E / EP experts of every MoE layer of its stage; the distributed optimizer shards the
experts' state over expert-DP = trainer.gpus / (EP x PP) and the dense parameters' (the routers
among them) over DP. EP must divide DP and the experts; TP > 1 is refused (megatron-core needs
sequence parallelism for it, which tandem does not use). LoRA on an MoE model is refused.

Smallest change: the knobs are, in this order, the chunked loss head (off -> 4096 -> 1024
positions), TP up (within trainer.gpus; for an MoE model EP up instead), recompute on, the micro-batch (samples halved down to 1,
or the packing budget halved down to the longest sample) and the optimizer offload to the CPU
(megatron: fraction 0.5 -> 1.0, with the precision-aware optimizer this stack requires with it).
Single changes first in that order, then pairs, and so on; within a group smaller steps first.
The first candidate that fits is reported.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field, replace

from tandem.config import TandemConfig
from tandem.lab.plan import memory as mem
from tandem.lab.plan.colocated import PhasePeaks, phase_peaks
from tandem.lab.plan.layout import TrainerSetting, check_layout
from tandem.lab.plan.shape import ModelShape, PlanError, load_shape

DTYPE_BYTES = mem.DTYPE_BYTES


@dataclass(frozen=True)
class RankMemory:
    """One trainer rank's bytes (the worst pipeline stage)."""

    stage: int
    params: int
    state: mem.TrainingState
    """Of every parameter the rank holds: the dense and the expert ones together."""
    reference: int
    activations: mem.Activations
    expert_params: int = 0
    """Of `params`: the experts' (E / EP per MoE layer of the stage)."""
    expert_state: mem.TrainingState | None = None
    """Of `state`: the experts' weights, grads and optimizer state (sharded over expert-DP)."""
    router_params: int = 0
    """Of the dense parameters: the MoE layers' routers."""
    router_state: mem.TrainingState | None = None
    """Of `state`: the routers' weights, grads and optimizer state (Megatron; dense: sharded over DP)."""

    @property
    def total(self) -> int:
        return self.state.total + self.reference + self.activations.total


@dataclass(frozen=True)
class EnginePlan:
    backend: str
    count: int
    context_len: int
    memory: mem.EngineMemory
    running_per_engine: int
    fits: bool

    @property
    def kv_limited(self) -> bool:
        return self.memory.kv_tokens < self.running_per_engine * self.context_len


@dataclass
class NodePlan:
    model: ModelShape
    gpu_bytes: int
    trainer: TrainerSetting | None
    rank: RankMemory | None
    engines: EnginePlan | None
    change: TrainerSetting | None = None
    """The smallest change of the trainer knobs that fits (None: it fits already, or nothing does)."""
    change_rank: RankMemory | None = None
    frugal: TrainerSetting | None = None
    """When no change fits: every knob at its end, and the longest sequence that fits there."""
    longest_fitting_seq: int | None = None
    notes: list[str] = field(default_factory=list)
    colocated: PhasePeaks | None = None
    """run.colocate = true: each phase's peak on one GPU shared by the trainer and its engines
    (tandem.lab.plan.colocated); then the verdict is theirs."""

    @property
    def trainer_budget(self) -> int:
        return self.gpu_bytes - mem.DEVICE_RESERVE - mem.TRAINER_RUNTIME_RESERVE

    @property
    def trainer_fits(self) -> bool:
        return self.rank is None or self.rank.total <= self.trainer_budget

    @property
    def fits(self) -> bool:
        if self.colocated is not None:
            return self.colocated.fits
        return self.trainer_fits and (self.engines is None or self.engines.fits)


# --------------------------------------------------------------------------- trainer
def megatron_state(s: TrainerSetting, params: int, trainable: int, shards: int) -> mem.TrainingState:
    """Megatron's weights, grads and optimizer state of `params` parameters sharded over `shards` ranks."""
    return mem.training_state(params, trainable, shards, bf16=s.bf16, distributed=s.distributed_optimizer,
                              grad_bytes=s.grad_bytes, offload_fraction=s.offload_fraction,
                              precision_aware=s.precision_aware)


def _state(shape: ModelShape, s: TrainerSetting, params: int, experts: int = 0
           ) -> tuple[mem.TrainingState, mem.TrainingState | None, int]:
    """(weights, grads and optimizer state; the experts' part of it; the KL reference's weights) of a rank
    holding `params` parameters, `experts` of them expert parameters."""
    trainable = params
    if s.lora_rank:  # adapters train; the base is frozen (no grads, no optimizer state)
        trainable = shape.lora_params(s.lora_rank, list(s.lora_targets)) // (s.tp * s.pp)
    adapters = trainable if s.lora_rank else 0
    if s.backend == "torch":  # fp32 master weights, grads and AdamW; bf16 autocast copies
        state = mem.TrainingState(weights=(params + adapters) * 4 + (params * 2 if s.bf16 else 0),
                                  grads=trainable * 4, optimizer=trainable * 8)
        return state, None, (params * 4 if s.reference_model else 0)
    param_bytes = 2 if s.bf16 else 4
    # Dense parameters are sharded over DP, the experts' over expert-DP (their own gradient buckets).
    dense = megatron_state(s, params - experts, trainable - experts, s.dp)
    expert = megatron_state(s, experts, experts, s.expert_dp) if experts else None
    state = dense if expert is None else mem.TrainingState(
        weights=dense.weights + expert.weights, grads=dense.grads + expert.grads,
        optimizer=dense.optimizer + expert.optimizer, host=dense.host + expert.host)
    state = replace(state, weights=state.weights + adapters * param_bytes)
    return state, expert, (params * param_bytes if s.reference_model else 0)


def _stage_memory(shape: ModelShape, s: TrainerSetting, stage: int) -> RankMemory:
    params = shape.rank_params(s.tp, s.pp, stage, s.ep)
    experts = shape.rank_expert_params(s.pp, stage, s.ep) if s.backend == "megatron" else 0
    state, expert_state, reference = _state(shape, s, params, experts)
    kernels = mem.TANDEM_MEGATRON if s.bf16 else replace(mem.TANDEM_MEGATRON, act_bytes=4)
    acts = mem.stage_activations(shape, kernels, tokens=s.tokens, tp=s.tp, pp=s.pp, stage=stage,
                                 recompute=s.recompute, logit_chunk=s.logit_chunk)
    routers = shape.stage_moe_layers(s.pp, stage) * shape.router_params
    router_state = megatron_state(s, routers, routers, s.dp) if routers and s.backend == "megatron" else None
    return RankMemory(stage=stage, params=params, state=state, reference=reference, activations=acts,
                      expert_params=experts, expert_state=expert_state, router_params=routers,
                      router_state=router_state)


def trainer_memory(shape: ModelShape, s: TrainerSetting) -> RankMemory:
    """The most loaded rank of the trainer at setting `s`."""
    check_layout(shape, s)
    return max((_stage_memory(shape, s, k) for k in range(s.pp)), key=lambda r: r.total)


def trainer_setting(cfg: TandemConfig, shape: ModelShape, seq_len: int) -> TrainerSetting:
    tc = cfg.trainer
    if tc.backend != "megatron":  # one device, no sharding: the torch (or sim) trainer
        return TrainerSetting(
            backend=tc.backend, gpus=1, tp=1, pp=1, micro_batch=tc.micro_batch_size, recompute=False, seq_len=seq_len,
            bf16=cfg.model.dtype != "float32", distributed_optimizer=False, lora_rank=tc.lora.rank,
            lora_targets=tuple(tc.lora.target_modules), reference_model=tc.loss.kl_coef > 0 and not tc.lora.enabled,
            logit_chunk=tc.logprob_chunk_tokens, max_tokens=tc.max_tokens_per_micro_batch)
    m = tc.megatron
    return TrainerSetting(
        backend=tc.backend, gpus=tc.gpus, tp=m.tensor_parallel, pp=m.pipeline_parallel, micro_batch=tc.micro_batch_size,
        recompute=m.recompute, seq_len=seq_len, bf16=m.bf16, distributed_optimizer=m.use_distributed_optimizer,
        lora_rank=tc.lora.rank, lora_targets=tuple(tc.lora.target_modules),
        reference_model=tc.loss.kl_coef > 0 and not tc.lora.enabled,
        logit_chunk=tc.logprob_chunk_tokens, max_tokens=tc.max_tokens_per_micro_batch,
        offload_fraction=m.optimizer_offload_fraction if m.optimizer_cpu_offload else 0.0,
        precision_aware=m.precision_aware_optimizer,
        grad_bytes=2 if m.main_grads_dtype == "bfloat16" else 4, ep=m.expert_parallel)


CHUNK_STEPS = (4096, 1024)
"""The chunked loss head's sizes the search tries (positions per chunk)."""
OFFLOAD_STEPS = (0.5, 1.0)
"""The optimizer offload fractions the search tries."""


def knob_options(shape: ModelShape, s: TrainerSetting) -> list[list[dict]]:
    """The values each knob may take, the current one first, as `replace` arguments, in the search's
    order: the chunked loss head, TP up (dividing trainer.gpus / PP and the model's heads, KV heads and
    MLP width; a mixture-of-experts model stays at TP 1), EP up (MoE only: dividing DP and the experts),
    recompute on, the micro-batch down (samples halved to 1, or the packing budget halved to the longest
    sample), the optimizer offloaded (Megatron's distributed optimizer only)."""
    chunks = [s.logit_chunk] + [c for c in CHUNK_STEPS if 0 < c < (s.logit_chunk or s.tokens + 1)]
    tps, eps, recomputes, offloads = [s.tp], [s.ep], [s.recompute], [s.offload_fraction]
    if s.backend == "megatron":
        room = s.gpus // s.pp
        if shape.experts:
            eps = [e for e in range(s.ep, room + 1) if room % e == 0 and shape.experts % e == 0]
        else:
            tps = [t for t in range(s.tp, room + 1) if room % t == 0 and shape.heads % t == 0
                   and shape.kv_heads % t == 0 and shape.ffn % t == 0]
        recomputes = [s.recompute] if s.recompute else [False, True]
        if s.distributed_optimizer and not s.lora_rank:
            offloads += [f for f in OFFLOAD_STEPS if f > s.offload_fraction]
    if s.max_tokens:
        sizes, key = [s.max_tokens], "max_tokens"
        while sizes[-1] // 2 >= s.seq_len:
            sizes.append(sizes[-1] // 2)
    else:
        sizes, key = [s.micro_batch], "micro_batch"
        while sizes[-1] > 1:
            sizes.append(sizes[-1] // 2)
    return [[{"logit_chunk": c} for c in chunks], [{"tp": t} for t in tps], [{"ep": e} for e in eps],
            [{"recompute": r} for r in recomputes], [{key: n} for n in sizes],
            [{"offload_fraction": f, "precision_aware": s.precision_aware or f > s.offload_fraction}
             for f in offloads]]


def candidate_changes(shape: ModelShape, s: TrainerSetting) -> list[TrainerSetting]:
    """Every change of the knobs: fewest knobs first; among changes of as many knobs, in the knobs'
    order (`knob_options`); smaller steps first."""
    options = knob_options(shape, s)
    keyed = []
    for picks in itertools.product(*(range(len(o)) for o in options)):
        unchanged = tuple(i == 0 for i in picks)
        if not all(unchanged):
            changes = {k: v for o, i in zip(options, picks) for k, v in o[i].items()}
            keyed.append(((len(picks) - sum(unchanged), unchanged, picks), replace(s, **changes)))
    return [setting for _, setting in sorted(keyed, key=lambda pair: pair[0])]


def most_frugal(shape: ModelShape, s: TrainerSetting) -> TrainerSetting:
    """Every knob at its end: the smallest chunk, the most TP (or EP), recompute on, the smallest
    micro-batch, the whole optimizer offloaded."""
    changes = {k: v for o in knob_options(shape, s) for k, v in o[-1].items()}
    return replace(s, **changes)


def longest_fitting_seq(shape: ModelShape, s: TrainerSetting, budget: int) -> int:
    """The longest micro-batch sequence that fits at setting `s` (0 if none does)."""
    lo, hi = 0, s.seq_len
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if trainer_memory(shape, replace(s, seq_len=mid)).total <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


# --------------------------------------------------------------------------- engines
def engine_context(cfg: TandemConfig, shape: ModelShape) -> int:
    sglang_args = cfg.engine.sglang.args if cfg.engine.backend == "sglang" else {}
    return int(sglang_args.get("context_length") or shape.max_positions)


def running_per_engine(cfg: TandemConfig) -> int:
    """Requests one engine may decode at once: its share of the rollouts in flight, capped."""
    r = cfg.rollout
    groups = math.ceil(r.prompts_per_step * r.oversample) * (cfg.effective_staleness + 1)
    in_flight = min(r.client.concurrency, groups * r.samples_per_prompt)
    return min(cfg.engine.max_running_requests, math.ceil(in_flight / cfg.engine.count))


def engine_plan(cfg: TandemConfig, shape: ModelShape, gpu_bytes: int) -> EnginePlan | None:
    e = cfg.engine
    if e.backend not in ("sglang", "embedded"):
        return None  # sim engines use no GPU; external engines live on other hosts
    dtype = DTYPE_BYTES[cfg.model.dtype]
    context = engine_context(cfg, shape)
    if e.backend == "sglang":  # mem_fraction_static in (0, 1): the config's bounds
        memory = mem.sglang_memory(shape, gpu_bytes, e.sglang.mem_fraction_static, dtype_bytes=dtype)
        fits = memory.kv_tokens >= context
    else:
        per_token = mem.kv_bytes_per_token(shape, dtype)
        memory = mem.EngineMemory(weights=shape.total_params() * dtype, kv_pool=e.max_total_tokens * per_token,
                                  kv_bytes_per_token=per_token)
        fits = memory.weights + memory.kv_pool <= gpu_bytes - mem.DEVICE_RESERVE
    return EnginePlan(backend=e.backend, count=e.count, context_len=context, memory=memory,
                      running_per_engine=running_per_engine(cfg), fits=fits)


# --------------------------------------------------------------------------- the node
def trainer_seq_len(cfg: TandemConfig, shape: ModelShape) -> int:
    if cfg.environment.name:
        return cfg.environment.max_context_tokens
    return engine_context(cfg, shape)


def plan_node(cfg: TandemConfig, shape: ModelShape, gpu_bytes: int, seq_len: int | None = None) -> NodePlan:
    """Plan the trainer ranks and the engines of `cfg` on GPUs of `gpu_bytes` each."""
    if gpu_bytes <= mem.DEVICE_RESERVE + mem.TRAINER_RUNTIME_RESERVE:
        raise PlanError(f"a GPU of {gpu_bytes / mem.GIB:g} GiB is smaller than the reserves the planner keeps")
    plan = NodePlan(model=shape, gpu_bytes=gpu_bytes, trainer=None, rank=None,
                    engines=engine_plan(cfg, shape, gpu_bytes))
    if cfg.trainer.backend == "sim":
        plan.notes.append("trainer.backend = 'sim' uses no GPU: only the engines are planned")
        return plan
    setting = trainer_setting(cfg, shape, seq_len or trainer_seq_len(cfg, shape))
    plan.trainer, plan.rank = setting, trainer_memory(shape, setting)
    if cfg.colocated:
        plan.colocated = phase_peaks(plan, cfg)
    if plan.trainer_fits:
        return plan
    for candidate in candidate_changes(shape, setting):
        rank = trainer_memory(shape, candidate)
        if rank.total <= plan.trainer_budget:
            plan.change, plan.change_rank = candidate, rank
            return plan
    plan.frugal = most_frugal(shape, setting)
    plan.longest_fitting_seq = longest_fitting_seq(shape, plan.frugal, plan.trainer_budget)
    return plan


def one_gpu_verdict(cfg: TandemConfig, gpu_bytes: int) -> tuple[bool, str]:
    """For the launcher's run.colocate = "auto": whether `cfg` (colocated) fits one GPU of `gpu_bytes`,
    and a one-line summary of its phases' peaks."""
    peaks = plan_node(cfg, load_shape(cfg.model), gpu_bytes).colocated
    if peaks is None:
        return False, "the plan has no trainer or no engines on the GPU"
    gib = mem.GIB
    return peaks.fits, (f"peaks: generation {peaks.generation / gib:.1f}, training {peaks.training / gib:.1f}, "
                        f"hand-over {peaks.handover / gib:.1f} of {peaks.usable / gib:.1f} GiB")
