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
5. trainer.megatron.optimizer_cpu_offload: megatron-core's own HybridDeviceOptimizer takes the
   place of the AdamW above, built with the arguments `get_megatron_optimizer` gives it
   (optimizer/__init__.py). It moves "GPU" parameters to the host and back on CUDA streams, so
   while it runs (`device_stand_ins`) the model's parameters play the GPU tensors (is_cuda),
   streams and events are synchronous no-ops (the CPU runs every copy at once), pinning is a
   no-op and .to("cuda") stays on the CPU. Its own logic - which parameters it offloads, the
   host copies of grads and fp32 weights, one CPU AdamW per parameter with overlap, the copy
   back - runs as it is. One bug of megatron-core 0.16.1 is stepped around when loading a
   checkpoint (`CpuAdamW.load_state_dict`): its loader fails when every parameter is fp32.
6. The MoE all-to-all token dispatcher makes a CUDA stream when it is built and copies the
   token counts to the host on it (`maybe_move_tensor_to_cpu`, which turns the all-to-all split
   sizes into numpy arrays, the sequence all_to_all_single takes): `install` gives torch.cuda a
   synchronous stand-in stream (`_SyncStream`, as in point 5) and the dispatcher a host copy that
   gives the same types from the CPU tensors those counts already are.
7. Expert parallelism (trainer.megatron.expert_parallel > 1): each rank holds different experts
   (megatron marks their parameters allreduce=False). As megatron's DDP does, their gradients
   are summed over the expert-data-parallel group only and divided by the whole DP size, and the
   grad norm sums them over the expert-parallel ranks, counted once each.
Pipeline parallelism is not supported on CPU (Megatron's schedule allocates on CUDA).
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Iterable, Iterator

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
    torch.cuda.current_device = _cpu_device
    # Point 6: the MoE dispatcher's device-to-host stream.
    # Points 5 and 6: CUDA streams (HybridDeviceOptimizer's copies, the MoE dispatcher's device-to-host stream).
    torch.cuda.Stream = _SyncStream
    torch.cuda.current_stream = _current_stream
    torch.cuda.stream = _on_stream
    from megatron.core.transformer.moe import token_dispatcher

    token_dispatcher.maybe_move_tensor_to_cpu = _host_copy


def _current_stream(device: Any = None) -> "_SyncStream":
    return _SYNC_STREAM


def _on_stream(stream: Any) -> contextlib.AbstractContextManager:
    return contextlib.nullcontext()


def _host_copy(tensor: Any, as_numpy: bool = False, record_stream: bool = False) -> Any:
    """megatron-core's `maybe_move_tensor_to_cpu` for tensors already on the host (point 6)."""
    return tensor.numpy() if as_numpy and isinstance(tensor, Tensor) else tensor


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


class _SyncStream:
    """A CUDA stream on the CPU: every copy has finished when it returns, so waits are no-ops."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def wait_stream(self, stream: Any) -> None:
        pass

    def record_event(self, event: Any = None) -> "_SyncStream":
        return self  # an event that has already happened

    def synchronize(self) -> None:
        pass

    def wait(self, stream: Any = None) -> None:
        pass


_SYNC_STREAM = _SyncStream()
_MISSING = object()


def _on_cpu(device: Any) -> Any:
    return "cpu" if (isinstance(device, str) and device.startswith("cuda")) or \
        (isinstance(device, torch.device) and device.type == "cuda") else device


@contextlib.contextmanager
def device_stand_ins(device_params: Iterable[Tensor]) -> Iterator[None]:
    """While active, the CPU plays CUDA for HybridDeviceOptimizer (point 5 in the module docstring)."""
    storages = {p.untyped_storage().data_ptr() for p in device_params}
    tensor_to, torch_empty = torch.Tensor.to, torch.empty

    def to(t: Tensor, *args: Any, **kwargs: Any) -> Tensor:
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        return tensor_to(t, *(_on_cpu(a) for a in args), **kwargs)

    def empty(*args: Any, **kwargs: Any) -> Tensor:
        kwargs.pop("pin_memory", None)
        return torch_empty(*args, **kwargs)

    patches = [(torch.Tensor, "is_cuda", property(lambda t: t.untyped_storage().data_ptr() in storages)),
               (torch.Tensor, "pin_memory", lambda t, *a, **k: t), (torch.Tensor, "to", to), (torch, "empty", empty),
               (torch.cuda, "current_stream", _current_stream), (torch.cuda, "Stream", _SyncStream),
               (torch.cuda, "stream", _on_stream)]  # as `install` sets them: this runs without it too (tests)
    saved = [(owner, name, owner.__dict__.get(name, _MISSING)) for owner, name, _ in patches]
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            if value is _MISSING:
                delattr(owner, name)
            else:
                setattr(owner, name, value)


def hybrid_device_optimizer(groups: list[dict], device_params: list[Tensor], *, lr: float, betas: tuple[float, float],
                            eps: float, weight_decay: float, offload_fraction: float, overlap: bool):
    """megatron-core's HybridDeviceOptimizer with the arguments megatron-core 0.16.1's
    `_get_megatron_optimizer_based_on_param_groups` passes it for Adam (no TE: torch AdamW on both sides)."""
    from megatron.core.optimizer.cpu_offloading.hybrid_optimizer import HybridDeviceOptimizer

    with device_stand_ins(device_params):
        return HybridDeviceOptimizer(
            groups, offload_fraction=offload_fraction, cpu_optimizer_cls=torch.optim.AdamW,
            gpu_optimizer_cls=torch.optim.AdamW, overlap_cpu_optimizer_d2h_h2d=overlap, pin_cpu_grads=True,
            pin_cpu_params=True, param_update_in_fp32=True, lr=lr, weight_decay=weight_decay,
            betas=betas, eps=eps, bias_correction=True, fused=True)


class CpuAdamW:
    """Stand-in for megatron.core.optimizer's optimizer on CPU (see points 3 and 5 above).

    `step()` returns (update_successful, grad_norm, num_zeros_in_grad) like Megatron's.
    `offload` (trainer.megatron: optimizer_offload_fraction, overlap_cpu_optimizer_d2h_h2d), when
    given, makes the inner optimizer megatron-core's HybridDeviceOptimizer.
    """

    def __init__(self, named_params: Iterable[tuple[str, torch.nn.Parameter]], *, lr: float,
                 betas: tuple[float, float], weight_decay: float, clip_grad: float, eps: float = 1e-8,
                 offload: tuple[float, bool] | None = None):
        from megatron.core import parallel_state as ps

        named = [(n, p) for n, p in named_params if p.requires_grad]
        decay = [p for n, p in named if not _no_weight_decay(n, p)]
        no_decay = [p for n, p in named if _no_weight_decay(n, p)]
        groups = [g for g in ({"params": decay, "weight_decay": weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}) if g["params"]]
        self.params = [p for _, p in named]
        # Point 7: expert-parallel parameters (megatron's mark), and the groups their grads meet in.
        self.expert_params = {id(p) for p in self.params if not getattr(p, "allreduce", True)}
        self.expert_dp_group = ps.get_expert_data_parallel_group()
        self.expert_norm_group = ps.get_expert_tensor_model_pipeline_parallel_group()
        # Same rule as megatron.core.distributed.finalize_model_grads (qk_layernorm weights).
        self.tp_summed = [p for n, p in named if "q_layernorm" in n or "k_layernorm" in n]
        self.offloaded = offload is not None
        if offload is None:
            self.optimizer = torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)
        else:
            self.optimizer = hybrid_device_optimizer(groups, self.params, lr=lr, betas=betas, eps=eps,
                                                     weight_decay=weight_decay, offload_fraction=offload[0],
                                                     overlap=offload[1])
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
        dp = dist.get_world_size(self.dp_group)
        if dp == 1:
            return
        for p in self.params:
            expert = id(p) in self.expert_params
            dist.all_reduce(p.grad, group=self.expert_dp_group if expert else self.dp_group)
            p.grad.div_(dp)

    def grad_norm(self) -> float:
        """Global L2 norm of the full (unsharded) gradient."""
        sq = torch.zeros((), dtype=torch.float64)
        expert_sq = torch.zeros((), dtype=torch.float64)
        for p in self.params:
            if p.grad is None:
                continue
            if id(p) in self.expert_params:  # whole on each rank (expert tensor parallel 1), one rank each
                expert_sq += p.grad.detach().double().square().sum()
            # Megatron marks TP-sharded params; replicated ones would be counted tp times.
            elif getattr(p, "tensor_model_parallel", False) or self.tp_rank == 0:
                sq += p.grad.detach().double().square().sum()
        dist.all_reduce(sq, group=self.mp_group)
        if self.expert_params:
            dist.all_reduce(expert_sq, group=self.expert_norm_group)
        return float((sq + expert_sq).sqrt())

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
        with self._devices():
            self.optimizer.step()
        return True, norm, 0

    def _devices(self) -> contextlib.AbstractContextManager:
        return device_stand_ins(self.params) if self.offloaded else contextlib.nullcontext()

    @property
    def param_groups(self) -> list[dict]:
        return self.optimizer.param_groups

    def state_dict(self) -> dict:
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        with self._devices():
            if not self.offloaded:
                self.optimizer.load_state_dict(state)
                return
            # megatron-core 0.16.1's HybridDeviceOptimizer cannot load a state whose parameters are all
            # fp32 with param_update_in_fp32 on (KeyError in _update_fp32_params_by_new_state: it keeps
            # fp32 copies only of lower-precision parameters). Every parameter here is fp32, for which
            # the flag changes nothing else, so it is off while loading.
            self.optimizer.param_update_in_fp32 = False
            try:
                self.optimizer.load_state_dict(state)
            finally:
                self.optimizer.param_update_in_fp32 = True
