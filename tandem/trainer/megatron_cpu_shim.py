"""The CPU shim: the small, explicit set of stand-ins that lets megatron-core run without CUDA.

Used ONLY when `torch.cuda.is_available()` is False (this CI box, laptops). It exists so the
Megatron backend's model, TP sharding, vocab-parallel loss and HF export can be tested on
CPU with torch.distributed on gloo. It never runs on a GPU node; there the backend uses
megatron.core's own DistributedDataParallel, distributed optimizer and bf16.

What megatron-core 0.16 hard-codes to CUDA, and what stands in for it here:
1. `torch.cuda.current_device()` is used as the device for buffers (rotary frequencies,
   layer allocations): redirected to "cpu".
2. The RNG tracker forks CUDA generator states: initialised as Megatron's *inference*
   tracker, whose fork is a no-op. Harmless because tandem trains with dropout 0 and
   loads every weight from HF (no random init is used).
3. `megatron.core.optimizer` (and DDP's grad buffers) allocate on CUDA: replaced by a
   plain `torch.optim.AdamW` over the Megatron parameters, with the same parameter
   groups as Megatron's (no weight decay on biases and 1-D params), and the global grad
   norm computed TP-aware (sharded params summed across ranks, replicated ones counted
   once) before clipping - the same numbers Megatron's optimizer computes, in fp32 only
   (bf16 is a GPU-only setting).
4. `finalize_model_grads` works on DDP's CUDA buffers: `CpuAdamW.finalize_grads` does its
   two jobs that apply here - sum the q/k-layernorm gradients over TP (each rank only saw
   its own heads, the weight is shared by all of them) and average over data parallel.
Pipeline parallelism is not supported on CPU (Megatron's schedule allocates on CUDA).
"""

from __future__ import annotations

import math
from typing import Iterable

import torch
import torch.distributed as dist
from torch import Tensor


def needed() -> bool:
    """True when there is no CUDA, i.e. when the Megatron backend must use this shim."""
    return not torch.cuda.is_available()


def install() -> None:
    """Point Megatron's CUDA device look-ups at the CPU (idempotent)."""
    if not needed():
        raise RuntimeError("megatron_cpu_shim.install() called on a machine with CUDA")
    torch.cuda.current_device = _cpu_device  # type: ignore[assignment]


def _cpu_device() -> str:
    return "cpu"


def init_rng_tracker(seed: int) -> None:
    """Megatron's RNG tracker without CUDA generators (see point 2 in the module docstring)."""
    from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

    torch.manual_seed(seed)
    model_parallel_cuda_manual_seed(seed, inference_rng_tracker=True, force_reset_rng=True)


def _no_weight_decay(name: str, param: Tensor) -> bool:
    # Megatron's default param groups (optimizer._get_param_groups): biases and 1-D params.
    return name.endswith(".bias") or param.dim() == 1


class CpuAdamW:
    """Stand-in for megatron.core.optimizer's optimizer on CPU (see point 3 above).

    `step()` returns (update_successful, grad_norm, num_zeros_in_grad) like Megatron's.
    """

    def __init__(self, named_params: Iterable[tuple[str, torch.nn.Parameter]], *, lr: float,
                 betas: tuple[float, float], weight_decay: float, clip_grad: float, eps: float = 1e-8):
        from megatron.core import parallel_state as ps

        named = [(n, p) for n, p in named_params if p.requires_grad]
        decay = [p for n, p in named if not _no_weight_decay(n, p)]
        no_decay = [p for n, p in named if _no_weight_decay(n, p)]
        groups = [g for g in ({"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
        self.params = [p for _, p in named]
        # Same rule as megatron.core.distributed.finalize_model_grads (qk_layernorm weights).
        self.tp_summed = [p for n, p in named if "q_layernorm" in n or "k_layernorm" in n]
        self.optimizer = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
        self.clip_grad = clip_grad
        self.dp_group = ps.get_data_parallel_group()
        self.tp_group = ps.get_tensor_model_parallel_group()
        self.mp_group = ps.get_model_parallel_group()
        self.tp_rank = ps.get_tensor_model_parallel_rank()

    def zero_grad(self) -> None:
        self.optimizer.zero_grad(set_to_none=True)

    def finalize_grads(self) -> None:
        """What Megatron's finalize_model_grads does on GPU (point 4 above); call once per mini-batch."""
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)  # a rank with no samples still joins the collectives
        if dist.get_world_size(self.tp_group) > 1:
            for p in self.tp_summed:
                dist.all_reduce(p.grad, group=self.tp_group)
        if dist.get_world_size(self.dp_group) == 1:
            return
        for p in self.params:
            dist.all_reduce(p.grad, group=self.dp_group)
            p.grad.div_(dist.get_world_size(self.dp_group))

    def grad_norm(self) -> float:
        """Global L2 norm of the full (unsharded) gradient."""
        sq = torch.zeros((), dtype=torch.float64)
        for p in self.params:
            if p.grad is None:
                continue
            # Megatron marks TP-sharded params; replicated ones would be counted tp times.
            if getattr(p, "tensor_model_parallel", False) or self.tp_rank == 0:
                sq += p.grad.detach().double().square().sum()
        dist.all_reduce(sq, group=self.mp_group)
        return float(sq.sqrt())

    def step(self) -> tuple[bool, float, int]:
        """Clip and update; gradients must already be finalized (`finalize_grads`)."""
        norm = self.grad_norm()
        if not math.isfinite(norm):
            return False, norm, 0
        if self.clip_grad > 0:
            coef = self.clip_grad / (norm + 1e-6)  # Megatron's and torch's clip rule
            if coef < 1.0:
                for p in self.params:
                    if p.grad is not None:
                        p.grad.mul_(coef)
        self.optimizer.step()
        return True, norm, 0

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.optimizer.load_state_dict(state)
