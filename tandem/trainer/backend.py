"""The contract between the trainer process loop and a training backend (torch, megatron, sim).

The loop in `tandem.trainer.__main__` only ever calls these methods, so a backend is free
to shard, offload or simulate as it likes as long as it takes finished `Sample`s and
hands back HF-named weights the engines can load.

The model-training backends (torch, megatron) also share, from here, the shape of a
training step (`run_minibatches`), its metrics (`summarize_step`) and the thread setting
of a trainer process (`configure_threads`), so the two cannot drift apart.
"""

from __future__ import annotations

import os
import time
from abc import ABC, abstractmethod
from typing import Any, Callable, TypeVar

import torch
from torch import Tensor

from tandem.sample import Sample
from tandem.trainer.batching import split_even, validate_samples

THREADS_ENV = "TANDEM_TORCH_THREADS"
Prepared = TypeVar("Prepared")


class TrainerBackend(ABC):
    is_main_process: bool = True
    """Multi-rank backends (torchrun) run the loop on every rank; only the main one publishes
    weights and writes results, while every rank still calls the (possibly collective) methods."""
    rank: int = 0
    """This process's global rank (its checkpoint part is trainer_rank{rank:03d}.pt)."""

    def barrier(self) -> None:
        """Every rank waits here for the others; one process has none to wait for."""

    @abstractmethod
    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        """One training step on a batch whose `advantage`s are already filled in.

        Applies trainer.minibatches optimizer steps and returns scalar metrics, at least:
        loss, kl, entropy, clip_frac, grad_norm, logprob_mismatch, tokens, train_time.
        """

    @abstractmethod
    def export_hf_state_dict(self) -> dict[str, Tensor]:
        """Full current weights, in HF parameter names and the configured model dtype, on CPU.

        Called on every rank; non-main ranks may return an empty dict after taking part in
        any gather.

        Tied weights appear once (under the name HF's loader expects), so the dict can be
        written with safetensors as-is. The tensors must not alias live parameters.
        """

    def export_adapter(self) -> dict[str, Tensor]:
        """With trainer.lora: the adapter's tensors under peft's names (adapter_model.safetensors),
        on CPU, in the configured model dtype; what each version publishes instead of whole weights."""
        raise NotImplementedError(f"{type(self).__name__} does not train LoRA adapters")

    def export_for_sync(self, lora: bool) -> dict[str, Tensor]:
        """What a weight version holds: the adapter with LoRA, else the whole weights. Only for a
        publish that writes them out before the next train_step: the tensors may be the live
        parameters themselves (see publish_view)."""
        return self.export_adapter() if lora else self.publish_view()

    def publish_view(self) -> dict[str, Tensor]:
        """export_hf_state_dict's tensors, allowed to alias the live parameters where they already
        are CPU tensors in the published dtype: publishing then writes them without a copy."""
        return self.export_hf_state_dict()

    def offload(self) -> dict[str, float]:
        """run.colocate, after a step is published: move what only training needs (optimizer state,
        grads, and where it pays the weights) off the device the engines are about to generate on.
        Returns metrics (trainer_offloaded_mb, trainer_offload_time, trainer_device_memory_mb); the
        default holds nothing on a device."""
        return {}

    def onload(self) -> dict[str, float]:
        """Before the next step: bring back what `offload` moved (metrics: trainer_onloaded_mb, trainer_onload_time)."""
        return {}

    def state_dict_for_checkpoint(self) -> dict[str, Any]:
        """Everything needed to resume training (weights, optimizer, counters)."""
        raise NotImplementedError(f"{type(self).__name__} does not support checkpoints")

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict_for_checkpoint` returned."""
        raise NotImplementedError(f"{type(self).__name__} does not support checkpoints")

    def close(self) -> None:
        """Release processes/devices; the default has nothing to release."""


def lora_settings(lora: Any) -> dict[str, Any] | None:
    """What a checkpoint records of trainer.lora (None: full fine-tuning); a resume must match it."""
    return lora.model_dump() if lora is not None and lora.enabled else None


def check_lora_settings(state: dict[str, Any], lora: Any) -> None:
    """Refuse a checkpoint trained with other LoRA settings (its adapters would not fit, or be ignored)."""
    if state.get("lora") != lora_settings(lora):
        raise ValueError(f"the checkpoint was trained with trainer.lora = {state.get('lora')}, this run has "
                         f"{lora_settings(lora)}: resume with the same settings")


def summarize_step(totals: dict[str, float], norms: list[float], skipped: int, num_samples: int,
                   lr: float, started: float) -> dict[str, float]:
    """The metrics every backend reports for one training step, from its summed micro-batch totals.

    `totals` holds per-minibatch losses summed over minibatches and token-weighted sums of
    the per-token metrics; one function so the torch and megatron backends cannot drift.
    """
    tokens = totals["tokens"]
    n = len(norms)

    def per_token(key: str) -> float:
        return totals[key] / tokens if tokens else 0.0

    return {
        "loss": totals["loss"] / n,
        "pg_loss": totals["pg_loss"] / n,
        "kl": per_token("kl"),
        "entropy": per_token("entropy"),
        "clip_frac": per_token("clip_frac"),
        "seq_clip_frac": totals.get("seq_clip_frac", 0.0) / num_samples if num_samples else 0.0,
        "ppo_kl": per_token("ppo_kl"),
        "grad_norm": sum(norms) / n,
        "logprob_mismatch": per_token("mismatch"),
        "tokens": tokens,
        "samples": float(num_samples),
        "optimizer_steps": float(n - skipped),
        "skipped_steps": float(skipped),
        "lr": float(lr),
        "train_time": time.perf_counter() - started,
    }


def run_minibatches(
    samples: list[Sample],
    minibatches: int,
    prepare: Callable[[list[Sample], bool], Prepared],
    accumulate: Callable[[Prepared], dict[str, float]],
    zero_grads: Callable[[], None],
    optimizer_step: Callable[[], tuple[float, bool]],
    lr: Callable[[], float],
) -> dict[str, float]:
    """One training step: `minibatches` optimizer steps over even, contiguous parts of the batch.

    `prepare(part, several)` collates a part and attaches its no-grad scores; `several` says
    that there is more than one part, and then rho must compare against the policy that
    existed *before the first* update, so every part is prepared before any step. With one
    part the live logp (detached) is that policy and rho == 1 exactly. `accumulate` runs
    forward/backward over a prepared part and returns its metric sums (including "tokens");
    `optimizer_step` returns (pre-clip grad norm, whether the update was applied).
    """
    t0 = time.perf_counter()
    validate_samples(samples)
    if not samples:
        raise ValueError("train_step got an empty batch")
    parts = split_even(samples, minibatches)
    prepared = [prepare(part, len(parts) > 1) for part in parts]
    totals: dict[str, float] = {}
    norms, skipped = [], 0
    for part in prepared:
        zero_grads()  # nothing accumulated elsewhere may leak into this step
        for k, v in accumulate(part).items():
            totals[k] = totals.get(k, 0.0) + v
        norm, applied = optimizer_step()
        norms.append(norm)
        skipped += not applied
    return summarize_step(totals, norms, skipped, len(samples), lr(), t0)


def configure_threads() -> int:
    """Honour TANDEM_TORCH_THREADS so the launcher can split a CPU box between engines and trainer.

    Without it torch uses every core, which on a shared CPU node starves the engines that
    run next to the trainer in async mode.
    """
    value = os.environ.get(THREADS_ENV)
    if value:
        torch.set_num_threads(max(1, int(value)))
    return torch.get_num_threads()
