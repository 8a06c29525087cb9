"""A NodePlan as text for a person, or as JSON for a script (sizes in bytes there, GiB here)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tandem.lab.plan import colocated
from tandem.lab.plan import memory as mem
from tandem.lab.plan.planner import EnginePlan, NodePlan, RankMemory, TrainerSetting
from tandem.lab.plan.shape import ModelShape


def gib(n: int) -> str:
    return f"{n / mem.GIB:8.2f}"


def micro_batch(s: TrainerSetting) -> str:
    if s.max_tokens:
        return f"packed micro-batches of up to {s.max_tokens:,} tokens (longest sample {s.seq_len:,})"
    return f"micro-batch {s.micro_batch} x {s.seq_len} tokens"


def loss_head(s: TrainerSetting) -> str:
    return f"loss head in chunks of {s.logit_chunk:,} tokens" if s.logit_chunk else "whole-micro-batch loss head"


def offload(s: TrainerSetting) -> str:
    if not s.offload_fraction:
        return "optimizer on the GPU"
    return (f"{s.offload_fraction:.0%} of the optimizer on the CPU"
            + (" (precision-aware)" if s.precision_aware else ""))


def describe(s: TrainerSetting) -> str:
    layout = f"TP {s.tp} x PP {s.pp} x DP {s.dp}" if s.backend == "megatron" else "one GPU"
    if s.backend == "megatron" and s.ep > 1:
        layout += f" (EP {s.ep}, expert-DP {s.expert_dp})"
    extras = ["recompute " + ("on" if s.recompute else "off"), "bf16" if s.bf16 else "fp32", loss_head(s)]
    if s.backend == "megatron":
        extras += ["distributed optimizer" if s.distributed_optimizer else "replicated optimizer", offload(s)]
    if s.lora_rank:
        extras.append(f"LoRA rank {s.lora_rank}")
    return f"{layout}, {micro_batch(s)}, " + ", ".join(extras)


def count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 10**8 else f"{n / 1e6:.3f} M"


def knobs(s: TrainerSetting) -> str:
    size = f"packing budget {s.max_tokens:,} tokens" if s.max_tokens else f"micro-batch {s.micro_batch}"
    parallel = f"TP {s.tp}" + (f", EP {s.ep}" if s.ep > 1 else "")
    parts = [loss_head(s), parallel, f"recompute {'on' if s.recompute else 'off'}", size]
    if s.backend == "megatron":
        parts.append(offload(s))
    return ", ".join(parts)


def row(label: str, n: int) -> str:
    return f"      {label:<52}{gib(n)} GiB"


def rank_lines(rank: RankMemory, s: TrainerSetting, shape: ModelShape) -> list[str]:
    st, a = rank.state, rank.activations
    shard = f", / DP {s.dp}" if s.backend == "megatron" and s.distributed_optimizer else ""
    if shard and rank.expert_state is not None:
        shard = ", sharded"
    where = f", {s.offload_fraction:.0%} offloaded" if s.offload_fraction else ""
    head = (f"final norm + one {s.logit_chunk:,}-token chunk of logits" if s.logit_chunk
            else "final norm + logits at the loss")
    lines = [f"    most loaded rank: pipeline stage {rank.stage}, {count(rank.params)} parameters",
             row(f"weights ({'bf16' if s.bf16 else 'fp32'})", st.weights),
             row(f"grads ({'bf16' if s.grad_bytes == 2 else 'fp32'})", st.grads),
             row(f"optimizer ({'fp32 master + Adam' if s.bf16 else 'Adam'}{shard}{where})", st.optimizer)]
    optional = [("KL reference weights", rank.reference), ("activations kept by the layers", a.layers),
                ("one layer recomputed in backward", a.recompute_working_set),
                (head, a.head), ("embedding dropout masks", a.embedding)]
    lines += [row(label, n) for label, n in optional if n or label.startswith("activations")]
    lines[4:4] = moe_lines(rank, s, shape)  # after the optimizer row: what of the state is experts, dense, routers
    lines.append(row("total (peak: the larger of the two above)" if a.recompute_working_set and a.head
                     else "total", rank.total))
    if st.host:
        lines.append(f"      pinned host memory of the offloaded optimizer: {gib(st.host).strip()} GiB per rank, "
                     f"{gib(st.host * s.gpus).strip()} GiB for the {s.gpus} ranks")
    return lines


def moe_lines(rank: RankMemory, s: TrainerSetting, shape: ModelShape) -> list[str]:
    """A mixture-of-experts rank's state split into experts, dense parameters and routers, and the routers'
    and dispatcher's activations ([] for a dense model or the torch trainer)."""
    experts, routers, a = rank.expert_state, rank.router_state, rank.activations
    if experts is None or routers is None:
        return []
    held = shape.stage_moe_layers(s.pp, rank.stage)
    where = "of the layer recomputed" if s.recompute else "of the layers' activations"
    return [f"    experts: {shape.experts // s.ep} of {shape.experts} per MoE layer on each of EP {s.ep} ranks, "
            f"{held} MoE layers: {count(rank.expert_params)} expert and {count(rank.params - rank.expert_params)} "
            "dense parameters on this rank",
            row(f"experts' state (optimizer / expert-DP {s.expert_dp})", experts.total),
            row(f"dense state (optimizer / DP {s.dp})", rank.state.total - experts.total),
            row(f"routers' state ({held} x [{shape.experts}, {shape.hidden}], in the dense)", routers.total),
            row(f"routers' activations ({where})", a.router),
            row(f"dispatched tokens ({where})", a.dispatched)]


def trainer_lines(plan: NodePlan) -> list[str]:
    s, rank = plan.trainer, plan.rank
    if s is None or rank is None:
        return [f"  trainer: {note}" for note in plan.notes]
    budget = plan.trainer_budget
    head = f"  trainer ({s.backend}, {s.gpus} GPU{'s' if s.gpus > 1 else ''}): {describe(s)}"
    verdict = "fits" if plan.trainer_fits else "DOES NOT FIT"
    return [head, *rank_lines(rank, s, plan.model),
            (f"    budget per GPU {gib(budget).strip()} GiB ({plan.gpu_bytes / mem.GIB:g} GiB less "
             f"{mem.DEVICE_RESERVE / mem.GIB:g} device and {mem.TRAINER_RUNTIME_RESERVE / mem.GIB:g} runtime "
             f"reserve): {verdict}, headroom {(budget - rank.total) / mem.GIB:.2f} GiB")]


def engine_lines(e: EnginePlan | None) -> list[str]:
    if e is None:
        return ["  engines: not on this node's GPUs (engine.backend sim or external)"]
    m = e.memory
    full = m.kv_tokens / e.context_len
    lines = [f"  engines ({e.backend}): {e.count} x 1 GPU, context {e.context_len} tokens",
             (f"    weights {gib(m.weights).strip()} GiB, KV {gib(max(m.kv_pool, 0)).strip()} GiB = "
              f"{m.kv_tokens:,} tokens at {m.kv_bytes_per_token / 1024:g} KiB/token "
              f"= {full:.1f} full-length requests: {'fits' if e.fits else 'DOES NOT FIT'}")]
    if e.kv_limited:
        lines.append(f"    up to {e.running_per_engine} requests run per engine: at full length they need "
                     f"{e.running_per_engine * e.context_len:,} tokens, so the engine queues or retracts "
                     f"(about {m.kv_tokens // max(e.running_per_engine, 1):,} tokens each if all run)")
    return lines


def change_lines(plan: NodePlan) -> list[str]:
    if plan.trainer_fits or plan.trainer is None:
        return []
    if plan.change is not None and plan.change_rank is not None:
        return [f"  smallest change that fits: {knobs(plan.change)} -> {gib(plan.change_rank.total).strip()} GiB per rank"]
    frugal = plan.frugal or plan.trainer
    parallel = "EP" if plan.model.experts and plan.trainer.backend == "megatron" else "TP"
    return [f"  smallest change that fits: none; no setting of the loss head, {parallel} (within trainer.gpus), "
            "recompute, micro-batch or optimizer offload fits.",
            (f"    At {knobs(frugal)} the longest micro-batch sequence that fits is "
             f"{plan.longest_fitting_seq:,} tokens (configured: {plan.trainer.seq_len:,})"),
            "    (context parallelism would split a sequence over GPUs, but this stack cannot run it: "
            "megatron-core 0.16.1 implements it only with Transformer Engine)"]


def text(plan: NodePlan) -> str:
    shape = plan.model
    active = f", {count(shape.total_params(active=True))} active" if shape.experts else ""
    lines = [(f"tandem plan: {shape.name} ({count(shape.total_params())} parameters{active}, {shape.layers} layers, "
              f"hidden {shape.hidden}, {shape.heads}/{shape.kv_heads} heads) on GPUs of {plan.gpu_bytes / mem.GIB:g} GiB")]
    lines += trainer_lines(plan) + engine_lines(plan.engines) + change_lines(plan)
    if plan.colocated is not None:
        lines += colocated.lines(plan.colocated)
    lines.append(f"verdict: {'FITS' if plan.fits else 'DOES NOT FIT'}")
    return "\n".join(lines)


def as_json(plan: NodePlan) -> dict[str, Any]:
    out = asdict(plan)
    out["model"]["total_params"] = plan.model.total_params()
    out["model"]["active_params"] = plan.model.total_params(active=True)
    out["trainer_budget"] = plan.trainer_budget
    if plan.trainer is not None:
        out["trainer"]["expert_dp"] = plan.trainer.expert_dp
    out["trainer_fits"] = plan.trainer_fits
    out["fits"] = plan.fits
    for key in ("rank", "change_rank"):
        rank = getattr(plan, key)
        if rank is not None:
            out[key]["total"] = rank.total
            out[key]["activations"]["total"] = rank.activations.total
    if plan.colocated is not None:
        out["colocated"].update(peak=plan.colocated.peak, fits=plan.colocated.fits)
    if plan.engines is not None:
        out["engines"]["kv_tokens"] = plan.engines.memory.kv_tokens
        out["engines"]["kv_limited"] = plan.engines.kv_limited
    return out
