"""The contract between the trainer process loop and a training backend (torch, megatron, sim).

The loop in `tandem.trainer.__main__` only ever calls these methods, so a backend is free
to shard, offload or simulate as it likes as long as it takes finished `Sample`s and
hands back HF-named weights the engines can load.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from typing import Any

from torch import Tensor

from tandem.sample import Sample


class TrainerBackend(ABC):
    is_main_process: bool = True
    """Multi-rank backends (torchrun) run the loop on every rank; only the main one publishes
    weights and writes results, while every rank still calls the (possibly collective) methods."""

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

    def state_dict_for_checkpoint(self) -> dict[str, Any]:
        """Everything needed to resume training (weights, optimizer, counters)."""
        raise NotImplementedError(f"{type(self).__name__} does not support checkpoints")

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict_for_checkpoint` returned."""
        raise NotImplementedError(f"{type(self).__name__} does not support checkpoints")

    def close(self) -> None:
        """Release processes/devices; the default has nothing to release."""


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
