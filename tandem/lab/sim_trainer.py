"""`trainer.backend = "sim"`: a timed stand-in for the trainer in sizing studies.

Each training step takes `trainer.sim.train_time_s / engine.sim.time_scale` wall seconds (the
same time scale the sim engines and the sim workload use, so the whole run is uniformly
`time_scale` times faster than the modelled one) and then the normal trainer loop publishes
a weight version of `trainer.sim.weight_size_gb` through the real sync path
(`sync.publish_weights`): real safetensors written, fsynced, renamed and read back by every
engine. So the sync cost in a sweep is real I/O, not a modelled constant.

No model is trained. The metrics it returns are the ones that can be computed honestly from
the batch: token count, the PPO loss at ratio 1 (what the first minibatch of an on-policy
step sees: minus the aggregated advantage), and an entropy estimate from the engines'
sampled-token logprobs (E[-log p] over sampled tokens). KL, clip fraction, gradient norm and
the trainer/engine logprob mismatch need a model and are reported as 0.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import torch
from torch import Tensor

from tandem.config.views import TrainerView
from tandem.sample import Sample
from tandem.trainer.backend import TrainerBackend

SHARD_BYTES = 256 << 20
"""Largest single tensor; a real checkpoint is many tensors, and so is the sim's."""


class SimTrainer(TrainerBackend):
    def __init__(self, cfg: TrainerView):
        self.cfg = cfg
        # One clock for the whole simulation: with sim engines, their time scale; beside real engines, real time.
        self.time_scale = cfg.engine.sim.time_scale if cfg.engine.backend == "sim" else 1.0
        self.train_time_s = cfg.trainer.sim.train_time_s
        self.dtype = getattr(torch, cfg.model.dtype)
        self.weights = make_weights(cfg.trainer.sim.weight_size_gb, self.dtype)
        self.steps = 0

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        if not samples:
            raise ValueError("train_step got an empty batch")
        t0 = time.perf_counter()
        metrics = batch_metrics(samples, self.cfg.trainer.loss.aggregation)
        # The weights change every step, so every published version differs from the last.
        for t in self.weights.values():
            t[0] = float(self.steps + 1)
        remaining = self.train_time_s / self.time_scale - (time.perf_counter() - t0)
        if remaining > 0:
            time.sleep(remaining)
        self.steps += 1
        return {**metrics, "train_time": time.perf_counter() - t0}

    def export_hf_state_dict(self) -> dict[str, Tensor]:
        return {k: v.clone() for k, v in self.weights.items()}

    def state_dict_for_checkpoint(self) -> dict[str, Any]:
        return {"steps": self.steps}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        self.steps = int(state["steps"])


def make_weights(size_gb: float, dtype: torch.dtype) -> dict[str, Tensor]:
    """Tensors totalling `size_gb` (10^9 bytes) of `dtype`, in shards of at most SHARD_BYTES."""
    total = max(1, int(size_gb * 1e9))
    elem = torch.empty((), dtype=dtype).element_size()
    numel = max(1, total // elem)
    per_shard = max(1, SHARD_BYTES // elem)
    out: dict[str, Tensor] = {}
    i = 0
    while numel > 0:
        n = min(per_shard, numel)
        # Random bits, so a compressing filesystem cannot make the sync look cheaper than it is.
        out[f"model.layers.{i}.sim_weight"] = torch.randn(n).to(dtype)
        numel -= n
        i += 1
    return out


def batch_metrics(samples: list[Sample], aggregation: str) -> dict[str, float]:
    """Model-free metrics of a batch (see the module docstring for what each one means)."""
    tokens = sum(s.num_model_tokens for s in samples)
    lps = [lp for s in samples for lp, m in zip(s.rollout_logprobs, s.loss_mask) if m]
    if aggregation == "token_mean":
        loss = -sum(s.advantage * s.num_model_tokens for s in samples) / max(tokens, 1)
    else:
        loss = -statistics.fmean(s.advantage for s in samples if s.num_model_tokens) if tokens else 0.0
    entropy = -statistics.fmean(lps) if lps else 0.0
    return {"loss": loss, "pg_loss": loss, "kl": 0.0, "entropy": entropy, "clip_frac": 0.0, "grad_norm": 0.0,
            "logprob_mismatch": 0.0, "tokens": float(tokens)}


__all__ = ["SimTrainer", "make_weights", "batch_metrics"]
