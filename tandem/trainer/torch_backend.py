"""Plain-torch trainer: an HF causal LM with AdamW on one device (CPU or one GPU).

One `train_step` takes a batch of finished samples (advantages filled in) and applies
`trainer.minibatches` optimizer steps. Each mini-batch is run as micro-batches of
`trainer.micro_batch_size` samples whose losses are normalized by the *mini-batch*
totals (samples or tokens), so the accumulated gradient equals that of one big forward.
The batch layout is `tandem.trainer.batching`'s; the loss is `tandem.losses.PolicyLoss`.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tandem import losses
from tandem.config import TandemConfig
from tandem.model_source import load_causal_lm, pick_device, resolve_model_path
from tandem.sample import Sample
from tandem.trainer.backend import TrainerBackend, configure_threads, run_minibatches
# collate and validate_samples are re-exported: callers import them from this module.
from tandem.trainer.batching import MicroBatch, chunks, collate, validate_samples

__all__ = ["TorchTrainer", "MicroBatch", "collate", "configure_threads", "validate_samples"]


class TorchTrainer(TrainerBackend):
    def __init__(self, cfg: TandemConfig, model_path: str | None = None):
        self.cfg = cfg
        tc = cfg.trainer
        self.policy_loss = losses.PolicyLoss.from_config(tc.loss)
        self.threads = configure_threads()
        self.device = torch.device(pick_device(tc.device))
        path = model_path or resolve_model_path(cfg)
        # fp32 master weights regardless of model.dtype: AdamW updates of lr ~1e-6 vanish in
        # bf16. Lower precision is used only for the CUDA forward (autocast) and the export.
        self.model = load_causal_lm(path, "float32", str(self.device), cfg.model.trust_remote_code)
        self.model.eval()  # no dropout: the trainer must score tokens like the engines do
        self.export_dtype = getattr(torch, cfg.model.dtype)
        self.autocast_dtype = (
            self.export_dtype if self.device.type == "cuda" and self.export_dtype != torch.float32 else None
        )
        self.ref_model = None
        if tc.loss.kl_coef > 0:
            self.ref_model = load_causal_lm(path, "float32", str(self.device), cfg.model.trust_remote_code)
            self.ref_model.eval().requires_grad_(False)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=tc.lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay)
        # Engines report log_softmax(logits / T) for T > 0; greedy (T = 0) engines report the plain softmax.
        t = cfg.rollout.temperature
        self.temperature = t if t > 0 else 1.0
        self.pad_id = self.model.config.pad_token_id if self.model.config.pad_token_id is not None else 0
        self.optimizer_steps = 0

    # ------------------------------------------------------------------ forward pieces
    def _logits(self, model: torch.nn.Module, mb: MicroBatch) -> Tensor:
        """Logits for positions 0..L-2 ([b, L-1, V]): position t predicts token t+1."""
        with torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None):
            out = model(input_ids=mb.input_ids, attention_mask=mb.attention_mask, use_cache=False)
        return out.logits[:, :-1]

    @torch.no_grad()
    def _score(self, model: torch.nn.Module, mb: MicroBatch) -> Tensor:
        return losses.token_logprobs(self._logits(model, mb), mb.targets, self.temperature)

    def _prepare(self, samples: list[Sample], with_old_logp: bool) -> list[MicroBatch]:
        """Collate into micro-batches and attach the no-grad scores they need (old, reference)."""
        micro = [collate(c, self.device, self.pad_id) for c in chunks(samples, self.cfg.trainer.micro_batch_size)]
        for mb in micro:
            if with_old_logp:
                mb.old_logp = self._score(self.model, mb)
            if self.ref_model is not None:
                mb.ref_logp = self._score(self.ref_model, mb)
        return micro

    def _accumulate(self, micro: list[MicroBatch]) -> dict[str, float]:
        """Forward/backward every micro-batch of one mini-batch; grads accumulate in .grad.

        Returns the mini-batch loss and token sums for the metrics (divided by the token
        count in `summarize_step`).
        """
        n_samples = sum(mb.input_ids.shape[0] for mb in micro)
        n_tokens = float(sum(mb.mask.sum().item() for mb in micro))
        sums = dict.fromkeys(losses.PolicyLoss.METRICS, 0.0)
        for mb in micro:
            logits = self._logits(self.model, mb)
            logp = losses.token_logprobs(logits, mb.targets, self.temperature)
            loss, metrics = self.policy_loss(logp, lambda: losses.entropy_from_logits(logits), mb,
                                             n_samples, n_tokens)
            if loss.requires_grad:
                loss.backward()
            for key, value in metrics.items():
                sums[key] += float(value)
        sums["tokens"] = n_tokens
        return sums

    def _optimizer_step(self) -> tuple[float, bool]:
        """Clip (trainer.grad_clip; 0 = off) and step; returns the pre-clip global grad norm and
        whether the step was taken (not with a non-finite norm)."""
        max_norm = self.cfg.trainer.grad_clip if self.cfg.trainer.grad_clip > 0 else math.inf
        grads = [p for p in self.params if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm)) if grads else 0.0
        applied = math.isfinite(norm)
        if applied:
            self.optimizer.step()
            self.optimizer_steps += 1
        self.optimizer.zero_grad(set_to_none=True)  # free the grads until the next mini-batch
        return norm, applied

    # ------------------------------------------------------------------ backend API
    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        return run_minibatches(
            samples, self.cfg.trainer.minibatches, prepare=self._prepare, accumulate=self._accumulate,
            zero_grads=lambda: self.optimizer.zero_grad(set_to_none=True), optimizer_step=self._optimizer_step,
            lr=lambda: self.optimizer.param_groups[0]["lr"])

    def export_hf_state_dict(self) -> dict[str, Tensor]:
        """CPU copies in model.dtype; a tied weight (lm_head = embed_tokens) is kept once, under the
        name HF's loader restores it from, because safetensors refuses aliased tensors."""
        tied_aliases = set(self.model.get_expanded_tied_weights_keys() or {})
        out: dict[str, Tensor] = {}
        owner_of: dict[tuple[int, tuple[int, ...]], str] = {}
        for name, t in self.model.state_dict().items():
            key = (t.data_ptr(), tuple(t.shape))
            if key in owner_of:
                if name in tied_aliases:
                    continue
                if owner_of[key] in tied_aliases:  # the alias came first: keep the source name
                    del out[owner_of[key]]
                else:
                    continue
            owner_of[key] = name
            out[name] = t.detach().to("cpu", dtype=self.export_dtype if t.is_floating_point() else t.dtype, copy=True)
        return out

    def state_dict_for_checkpoint(self) -> dict:
        return {
            "model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()},
            "optimizer": self.optimizer.state_dict(),
            "optimizer_steps": self.optimizer_steps,
        }

    def load_checkpoint_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer_steps = int(state["optimizer_steps"])
