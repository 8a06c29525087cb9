"""Colocation (run.colocate): the trainer and the engines take turns on the same GPU, so the plan is
per phase, each against one GPU's usable memory (its size less DEVICE_RESERVE):

    generation   engines on the GPU x their footprint + what the trainer keeps + the trainer's runtime
                 reserve. An SGLang engine's footprint is its static pool, engine.sglang.mem_fraction_static x
                 usable (weights and KV; SGLang expects the rest for its activations and CUDA graphs, and
                 here the trainer's share must fit in it too); an embedded engine's is its weights plus
                 engine.max_total_tokens of KV. The torch trainer keeps nothing (weights and AdamW state
                 wait in host memory); Megatron keeps its weights (megatron-core's offload moves the
                 optimizer and frees the grad buffers only).
    training     the trainer's most loaded rank (the ordinary trainer plan) + a released engine's residue
                 each (ENGINE_RELEASED_RESIDUE) + the runtime reserve.
    hand-over    the larger of: engines' weights resumed and being loaded (one tensor in flight, the
                 embedding, the largest) while the trainer keeps its residue; the trainer's state back on
                 the GPU (no activations yet) while the engines are still released. + the runtime reserve.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Protocol

from tandem.config import TandemConfig
from tandem.lab.plan import memory as mem

class PlanParts(Protocol):
    """What the phase peaks read of a node plan (tandem.lab.plan.planner.NodePlan, which holds them):
    typed here by shape so that the planner imports this module and not the other way round."""

    trainer: Any
    rank: Any
    engines: Any
    model: Any
    gpu_bytes: int

ENGINE_RELEASED_RESIDUE = mem.GIB
"""What a released engine still holds: its CUDA context and the memory its memory saver does not own.
An allowance, not a measurement (scripts/colocate_gpu_check.py records it on a GPU)."""


@dataclass(frozen=True)
class PhasePeaks:
    generation: int
    training: int
    handover: int
    usable: int
    """One GPU's memory less DEVICE_RESERVE."""
    engines_per_gpu: int
    trainer_residue: int
    """What the trainer keeps on the GPU while the engines generate."""

    @property
    def peak(self) -> int:
        return max(self.generation, self.training, self.handover)

    @property
    def fits(self) -> bool:
        return self.peak <= self.usable


def engine_footprint(plan: PlanParts, cfg: TandemConfig) -> int:
    e = plan.engines
    assert e is not None
    if e.backend == "sglang":
        return int(cfg.engine.sglang.mem_fraction_static * (plan.gpu_bytes - mem.DEVICE_RESERVE))
    return e.memory.weights + e.memory.kv_pool


def phase_peaks(plan: PlanParts, cfg: TandemConfig) -> PhasePeaks | None:
    """Each phase's peak on one GPU (module docstring); None when the plan has no trainer or no local engines."""
    s, rank, e = plan.trainer, plan.rank, plan.engines
    if s is None or rank is None or e is None:
        return None
    per_gpu = math.ceil(e.count / s.gpus)
    residue = 0 if s.backend == "torch" else rank.state.weights
    reserve = mem.TRAINER_RUNTIME_RESERVE
    largest = plan.model.vocab * plan.model.hidden * mem.DTYPE_BYTES[cfg.model.dtype]
    released = per_gpu * ENGINE_RELEASED_RESIDUE
    return PhasePeaks(
        generation=per_gpu * engine_footprint(plan, cfg) + residue + reserve,
        training=rank.total + released + reserve,
        handover=max(per_gpu * e.memory.weights + largest + residue, rank.state.total + rank.reference + released)
        + reserve,
        usable=plan.gpu_bytes - mem.DEVICE_RESERVE, engines_per_gpu=per_gpu, trainer_residue=residue)


def lines(p: PhasePeaks) -> list[str]:
    gib = lambda n: f"{n / mem.GIB:.2f} GiB"  # noqa: E731
    return [f"  colocated: {p.engines_per_gpu} engine(s) and the trainer take turns on each GPU "
            f"(usable {gib(p.usable)}; the trainer keeps {gib(p.trainer_residue)} while the engines generate)",
            f"    generation {gib(p.generation)}, training {gib(p.training)}, hand-over {gib(p.handover)}: "
            f"{'fits' if p.fits else 'DOES NOT FIT'}, headroom {gib(p.usable - p.peak)}"]

