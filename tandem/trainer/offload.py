"""Colocation, the trainer's half: hand the device's memory to the engines while they generate.

Between two train steps a colocated trainer (run.colocate) keeps nothing on its GPU that the
engines could use: the optimizer's state (AdamW's two moments, 8 B per trained parameter) and,
for the torch trainer, the weights themselves (fp32 master weights and the KL reference's) go to
host memory after the step's weights are published, and come back before the next step. Gradients
hold no memory between steps already (every optimizer step sets them to None; Megatron's
contiguous grad buffers are freed by megatron-core's own offload_grad_buffers).

Moving a module keeps its Parameter objects (`Module.to` swaps their data in place), so the
optimizer, which holds the Parameters, needs no rebuilding; its state is moved tensor by tensor.
On a CPU-only trainer the device is the host and there is nothing to move: `HostOffload` walks the
same tensors without copying them and reports the bytes it handed back (trainer_offloaded_mb, and
trainer_onloaded_mb on the way back), so a colocated run on a CPU still shows that every step handed
its state over and took it back. Told to copy anyway (`copy=True`), it runs the real moves on a CPU
(what the tests use to check that training is the same with them).
"""

from __future__ import annotations

import time
from typing import Iterable

import torch


def device_memory_mb(device: torch.device) -> float:
    """Memory this process holds in tensors on `device` (0 for the CPU: that is the host)."""
    return torch.cuda.memory_allocated(device) / 2**20 if device.type == "cuda" else 0.0


class HostOffload:
    """Moves modules' weights and optimizers' state between `device` and host memory."""

    def __init__(self, device: torch.device, modules: Iterable[torch.nn.Module],
                 optimizers: Iterable[torch.optim.Optimizer], copy: bool = False):
        self.device = torch.device(device)
        self.modules = [m for m in modules if m is not None]
        self.optimizers = list(optimizers)
        self.copy = copy
        """Copy even where device and host are one (CPU): the moves run, for tests."""
        self.offloaded = False

    @property
    def active(self) -> bool:
        return self.device.type != "cpu" or self.copy

    def _state_tensors(self) -> Iterable[tuple[dict, str, torch.Tensor]]:
        for optimizer in self.optimizers:
            for state in optimizer.state.values():
                for key, value in state.items():
                    if isinstance(value, torch.Tensor) and value.numel() > 1:
                        yield state, key, value  # a scalar `step` stays where torch keeps it

    def _to(self, value: torch.Tensor, to: torch.device) -> torch.Tensor:
        if not self.active:  # the device is the host: the tensor is already there, only counted
            return value
        if to.type == "cpu" and value.device.type == "cuda":  # into pinned memory, so the way back is fast
            host = torch.empty(value.shape, dtype=value.dtype, device="cpu", pin_memory=True)
            return host.copy_(value, non_blocking=True)
        return value.to(to, copy=self.copy, non_blocking=value.is_pinned())

    def _move(self, to: torch.device) -> int:
        """Every weight, buffer and optimizer state tensor to `to`; returns the bytes moved."""
        moved = 0
        for module in self.modules:
            for p in module.parameters():  # tied weights are one Parameter: moved once
                moved += p.numel() * p.element_size()
                p.data = self._to(p.data, to)
            for sub in module.modules():
                for key, buf in sub._buffers.items():
                    if buf is not None:
                        moved += buf.numel() * buf.element_size()
                        sub._buffers[key] = self._to(buf, to)
        for state, key, value in list(self._state_tensors()):
            moved += value.numel() * value.element_size()
            state[key] = self._to(value, to)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()  # the freed blocks go back to the driver, where the engines can take them
        return moved

    def offload(self) -> dict[str, float]:
        """After a step: weights and optimizer state to the host. Metrics: what moved and how long it took."""
        if self.offloaded:
            return {}
        t0 = time.perf_counter()
        peak = {}
        if self.device.type == "cuda":  # the step's peak, before the state leaves
            peak = {"trainer_train_peak_mb": torch.cuda.max_memory_allocated(self.device) / 2**20}
            torch.cuda.reset_peak_memory_stats(self.device)
        moved = self._move(torch.device("cpu"))
        self.offloaded = True
        return {"trainer_offloaded_mb": moved / 2**20, "trainer_offload_time": time.perf_counter() - t0,
                "trainer_device_memory_mb": device_memory_mb(self.device), **peak}

    def onload(self) -> dict[str, float]:
        """Before a step: everything back on the device."""
        if not self.offloaded:
            return {}
        t0 = time.perf_counter()
        moved = self._move(self.device)
        self.offloaded = False
        return {"trainer_onloaded_mb": moved / 2**20, "trainer_onload_time": time.perf_counter() - t0}
