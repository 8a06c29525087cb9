"""Plain-torch trainer: an HF causal LM with AdamW on one device (CPU or one GPU).

One `train_step` takes a batch of finished samples (advantages filled in) and applies
`trainer.minibatches` optimizer steps. Each mini-batch is run as micro-batches of
`trainer.micro_batch_size` samples whose losses are normalized by the *mini-batch*
totals (samples or tokens), so the accumulated gradient equals that of one big forward.

Token layout: a sample is prompt_ids + response_ids, right-padded in its micro-batch.
Logits at position t score token t+1, so every per-token tensor lives in the shifted
[b, L-1] layout and response token j of a sample with prompt length P sits at column
P-1+j. `loss_mask` (interleaved 0/1 for multi-turn) is copied there verbatim, so
observation tokens, the prompt and padding never reach the loss.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass

import torch
from torch import Tensor

from tandem import losses
from tandem.config import TandemConfig
from tandem.model_source import load_causal_lm, pick_device, resolve_model_path
from tandem.sample import Sample
from tandem.trainer.backend import TrainerBackend, summarize_step

THREADS_ENV = "TANDEM_TORCH_THREADS"


def configure_threads() -> int:
    """Honour TANDEM_TORCH_THREADS so the launcher can split a CPU box between engines and trainer.

    Without it torch uses every core, which on a shared CPU node starves the engines that
    run next to the trainer in async mode.
    """
    value = os.environ.get(THREADS_ENV)
    if value:
        torch.set_num_threads(max(1, int(value)))
    return torch.get_num_threads()


@dataclass
class MicroBatch:
    """Right-padded tensors of a few samples, per-token tensors in the shifted [b, L-1] layout."""

    input_ids: Tensor  # [b, L]
    attention_mask: Tensor  # [b, L]
    mask: Tensor  # [b, L-1] float, 1 where a response token is trained on
    advantages: Tensor  # [b, L-1]
    rollout_logp: Tensor  # [b, L-1]
    old_logp: Tensor | None = None  # [b, L-1]; None means "on-policy: use the live logp, detached"
    ref_logp: Tensor | None = None  # [b, L-1]; only with a KL penalty

    @property
    def targets(self) -> Tensor:
        return self.input_ids[:, 1:]


def validate_samples(samples: list[Sample]) -> None:
    for i, s in enumerate(samples):
        if not s.prompt_ids:
            raise ValueError(f"sample {i}: empty prompt_ids (the first response token needs a context)")
        n = len(s.response_ids)
        if len(s.loss_mask) != n or len(s.rollout_logprobs) != n:
            raise ValueError(
                f"sample {i}: response_ids ({n}), loss_mask ({len(s.loss_mask)}) and "
                f"rollout_logprobs ({len(s.rollout_logprobs)}) must be aligned"
            )


def collate(samples: list[Sample], device: torch.device, pad_id: int = 0) -> MicroBatch:
    """Right-pad samples into one micro-batch (see the module docstring for the layout)."""
    lengths = [len(s.prompt_ids) + len(s.response_ids) for s in samples]
    b, length = len(samples), max(max(lengths), 2)
    input_ids = torch.full((b, length), pad_id, dtype=torch.long)
    attention = torch.zeros((b, length), dtype=torch.long)
    mask = torch.zeros((b, length - 1))
    adv = torch.zeros((b, length - 1))
    rollout = torch.zeros((b, length - 1))
    for i, s in enumerate(samples):
        p, r = len(s.prompt_ids), len(s.response_ids)
        input_ids[i, : p + r] = torch.tensor(s.prompt_ids + s.response_ids, dtype=torch.long)
        attention[i, : p + r] = 1
        if r:
            mask[i, p - 1 : p - 1 + r] = torch.tensor(s.loss_mask, dtype=torch.float32)
            rollout[i, p - 1 : p - 1 + r] = torch.tensor(s.rollout_logprobs, dtype=torch.float32)
        adv[i, :] = float(s.advantage)
    return MicroBatch(
        input_ids.to(device), attention.to(device), mask.to(device), adv.to(device), rollout.to(device)
    )


def split_even(items: list, parts: int) -> list[list]:
    """`parts` contiguous chunks whose sizes differ by at most one (empty chunks dropped)."""
    q, r = divmod(len(items), parts)
    out, start = [], 0
    for k in range(parts):
        end = start + q + (1 if k < r else 0)
        if end > start:
            out.append(items[start:end])
        start = end
    return out


def chunks(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


class TorchTrainer(TrainerBackend):
    def __init__(self, cfg: TandemConfig, model_path: str | None = None):
        self.cfg = cfg
        tc = cfg.trainer
        self.loss_cfg = tc.loss
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
        if self.loss_cfg.kl_coef > 0:
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

        Returns token sums for the metrics (divided by the token count by the caller) and
        the mini-batch loss.
        """
        lc = self.loss_cfg
        n_samples = sum(mb.input_ids.shape[0] for mb in micro)
        n_tokens = float(sum(mb.mask.sum().item() for mb in micro))
        agg = dict(mode=lc.aggregation, num_samples=n_samples, num_tokens=n_tokens)
        sums = dict(loss=0.0, pg_loss=0.0, kl=0.0, entropy=0.0, clip_frac=0.0, ppo_kl=0.0, mismatch=0.0)
        for mb in micro:
            logits = self._logits(self.model, mb)
            logp = losses.token_logprobs(logits, mb.targets, self.temperature)
            old = logp.detach() if mb.old_logp is None else mb.old_logp
            w = losses.tis_weights(old, mb.rollout_logp, high=lc.tis_clip_high) if lc.tis else None
            pg, clipped = losses.policy_loss(
                logp, old, mb.advantages, mb.mask, lc.eps_clip, lc.eps_clip_high, lc.dual_clip_c, w
            )
            pg_loss = losses.aggregate(pg, mb.mask, **agg)
            loss = pg_loss
            if mb.ref_logp is not None:
                kl = losses.kl_penalty(logp, mb.ref_logp, lc.kl_estimator)
                loss = loss + lc.kl_coef * losses.aggregate(kl, mb.mask, **agg)
                sums["kl"] += float((kl.detach() * mb.mask).sum())
            # Entropy needs the full softmax; keep it out of the graph unless it is in the loss.
            with torch.set_grad_enabled(lc.entropy_coef != 0.0):
                ent = losses.entropy_from_logits(logits)
            if lc.entropy_coef != 0.0:
                loss = loss - lc.entropy_coef * losses.aggregate(ent, mb.mask, **agg)
            if loss.requires_grad:
                loss.backward()
            sums["loss"] += float(loss.detach())
            sums["pg_loss"] += float(pg_loss.detach())
            sums["entropy"] += float((ent.detach() * mb.mask).sum())
            sums["clip_frac"] += float(clipped.sum())
            sums["ppo_kl"] += float(((old - logp.detach()) * mb.mask).sum())
            sums["mismatch"] += float(((old - mb.rollout_logp).abs() * mb.mask).sum())
        sums["tokens"] = n_tokens
        return sums

    def accumulate_gradients(self, samples: list[Sample]) -> dict[str, float]:
        """Zero grads, then forward/backward `samples` as one on-policy mini-batch (no optimizer step).

        Exposed so tests (and debugging) can inspect exact gradients; train_step uses the same path.
        """
        validate_samples(samples)
        self.optimizer.zero_grad(set_to_none=True)
        return self._accumulate(self._prepare(samples, with_old_logp=False))

    def _optimizer_step(self) -> float:
        """Clip (trainer.grad_clip; 0 = off) and step; returns the pre-clip global grad norm."""
        max_norm = self.cfg.trainer.grad_clip if self.cfg.trainer.grad_clip > 0 else math.inf
        grads = [p for p in self.params if p.grad is not None]
        norm = float(torch.nn.utils.clip_grad_norm_(grads, max_norm)) if grads else 0.0
        if math.isfinite(norm):
            self.optimizer.step()
            self.optimizer_steps += 1
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    # ------------------------------------------------------------------ backend API
    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        t0 = time.perf_counter()
        validate_samples(samples)
        if not samples:
            raise ValueError("train_step got an empty batch")
        tc = self.cfg.trainer
        minibatches = split_even(samples, tc.minibatches)
        # With several optimizer steps per batch, rho must compare against the policy that
        # existed *before the first* update, so score everything up front. With one
        # mini-batch the live logp (detached) is that policy and rho == 1 exactly.
        several = len(minibatches) > 1
        prepared = [self._prepare(mb, with_old_logp=several) for mb in minibatches]

        totals: dict[str, float] = {}
        norms, skipped = [], 0
        self.optimizer.zero_grad(set_to_none=True)  # nothing accumulated elsewhere may leak into this step
        for micro in prepared:
            sums = self._accumulate(micro)
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + v
            before = self.optimizer_steps
            norms.append(self._optimizer_step())
            skipped += self.optimizer_steps == before
        return summarize_step(totals, norms, skipped, len(samples), self.optimizer.param_groups[0]["lr"], t0)

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
