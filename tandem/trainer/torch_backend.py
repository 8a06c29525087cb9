"""Plain-torch trainer: an HF causal LM with AdamW on one device (CPU or one GPU).

One `train_step` takes a batch of finished samples (advantages filled in) and applies
`trainer.minibatches` optimizer steps. Each mini-batch is run as micro-batches (of
`trainer.micro_batch_size` samples, or packed up to `trainer.max_tokens_per_micro_batch`
tokens) whose losses are normalized by the *mini-batch* totals (samples or tokens), so the
accumulated gradient equals that of one big forward. The batch layout is
`tandem.trainer.batching`'s; the loss is `tandem.losses.PolicyLoss`. With
`trainer.logprob_chunk_tokens` the LM head and log-softmax run per chunk of positions.
"""

from __future__ import annotations

import functools
import math
from typing import Callable

import torch
from torch import Tensor

from tandem import losses
from tandem.config.views import TrainerView
from tandem.model_source import load_causal_lm, pick_device, resolve_model_path
from tandem.moe import to_checkpoint_names
from tandem.sample import Sample
from tandem.trainer.backend import (TrainerBackend, check_lora_settings, configure_threads, lora_settings,
                                    run_minibatches)
# collate and validate_samples are re-exported: callers import them from this module.
from tandem.trainer.batching import MicroBatch, collate, micro_batches, validate_samples
from tandem.trainer.offload import HostOffload
from tandem.trainer.routing_replay import attach_routing, hf_routing_replay

__all__ = ["TorchTrainer", "MicroBatch", "collate", "configure_threads", "validate_samples"]


class TorchTrainer(TrainerBackend):
    def __init__(self, cfg: TrainerView, model_path: str | None = None):
        self.cfg = cfg
        tc = cfg.trainer
        self.policy_loss = losses.PolicyLoss.from_config(tc.loss)
        self.threads = configure_threads()
        self.device = torch.device(pick_device(tc.device))
        path = model_path or resolve_model_path(cfg)
        # fp32 master weights regardless of model.dtype: AdamW updates of lr ~1e-6 vanish in
        # bf16. Lower precision is used only for the CUDA forward (autocast) and the export.
        self.model = load_causal_lm(path, "float32", str(self.device), cfg.model.trust_remote_code)
        self.lora = tc.lora if tc.lora.enabled else None
        if self.lora is not None:
            self.model = with_lora_adapters(self.model, self.lora)
        self.model.eval()  # no dropout: the trainer must score tokens like the engines do
        if tc.logprob_chunk_tokens and getattr(self.model.config, "final_logit_softcapping", None):
            raise ValueError("config key 'trainer.logprob_chunk_tokens': this model soft-caps its logits after the LM "
                             "head, which the chunked head does not apply; set it to 0")
        moe = tc.moe
        self.routing = hf_routing_replay(self.model, moe.routing_replay) if moe.wants_routing else None
        """trainer.moe: the engine's routing, compared with the router's (and replayed) in every forward."""
        self.lora_dropouts = [m for n, m in self.model.named_modules()
                              if ".lora_dropout." in n and isinstance(m, torch.nn.Dropout)]
        """trainer.lora.dropout: active in the training forward only (the engines never drop)."""
        self.export_dtype = getattr(torch, cfg.model.dtype)
        self.autocast_dtype = (
            self.export_dtype if self.device.type == "cuda" and self.export_dtype != torch.float32 else None
        )
        self.ref_model = None
        # With LoRA the reference is the base model under the same weights, the adapter disabled:
        # no second copy of the model.
        if tc.loss.kl_coef > 0 and self.lora is None:
            self.ref_model = load_causal_lm(path, "float32", str(self.device), cfg.model.trust_remote_code)
            self.ref_model.eval().requires_grad_(False)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(self.params, lr=tc.lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay)
        # Engines report log_softmax(logits / T) for T > 0; greedy (T = 0) engines report the plain softmax.
        t = cfg.rollout.sampling.temperature
        self.temperature = t if t > 0 else 1.0
        self.pad_id = self.model.config.pad_token_id if self.model.config.pad_token_id is not None else 0
        self.optimizer_steps = 0
        self.host_offload = HostOffload(self.device, [self.model, self.ref_model], [self.optimizer])
        """run.colocate: the weights (policy and KL reference) and AdamW's state wait in host memory while
        the engines generate."""

    # ------------------------------------------------------------------ forward pieces
    def _autocast(self):
        return torch.autocast(self.device.type, dtype=self.autocast_dtype, enabled=self.autocast_dtype is not None)

    @staticmethod
    def _inputs(mb: MicroBatch) -> dict[str, Tensor]:
        # Packed rows: positions restart per sample and no attention mask, from which transformers
        # builds the block-diagonal causal mask (each sample attends to itself only).
        if mb.packed:
            return {"input_ids": mb.input_ids, "position_ids": mb.position_ids}
        return {"input_ids": mb.input_ids, "attention_mask": mb.attention_mask}

    def _token_scores(self, model: torch.nn.Module, mb: MicroBatch,
                      with_entropy: bool) -> tuple[Tensor, Callable[[], Tensor]]:
        """(log p of the shifted targets [b, L-1], a thunk giving the entropy [b, L-1]) - position t
        predicts token t+1. With trainer.logprob_chunk_tokens the LM head and log-softmax run per
        chunk of positions (`losses.chunked_scores`), the whole micro-batch's logits never exist."""
        if self.routing is None or model is not self.model:
            return self._scores_of(model, mb, with_entropy)
        # Agreement is counted in the training forward only (once per micro-batch and step).
        with self.routing.micro_batch(mb.routed, counting=torch.is_grad_enabled()):
            return self._scores_of(model, mb, with_entropy)

    def _scores_of(self, model: torch.nn.Module, mb: MicroBatch,
                   with_entropy: bool) -> tuple[Tensor, Callable[[], Tensor]]:
        chunk = self.cfg.trainer.logprob_chunk_tokens
        logp_fn = functools.partial(losses.token_logprobs, temperature=self.temperature)
        if chunk == 0:
            with self._autocast():
                logits = model(**self._inputs(mb), use_cache=False).logits[:, :-1]
            return logp_fn(logits, mb.targets), lambda: losses.entropy_from_logits(logits)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        with self._autocast():
            hidden = base.get_decoder()(**self._inputs(mb), use_cache=False).last_hidden_state[:, :-1]
        lm_head = base.get_output_embeddings()

        def head(rows: Tensor) -> Tensor:
            with self._autocast():  # the head as the whole-model forward runs it
                return lm_head(rows)

        logp, entropy = losses.chunked_scores(hidden, head, mb.targets, chunk, logp_fn,
                                              losses.entropy_from_logits if with_entropy else None,
                                              entropy_grad=self.policy_loss.entropy_coef != 0.0)
        return logp, lambda: entropy

    @torch.no_grad()
    def _score(self, model: torch.nn.Module, mb: MicroBatch) -> Tensor:
        return self._token_scores(model, mb, with_entropy=False)[0]

    def _prepare(self, samples: list[Sample], with_old_logp: bool) -> list[MicroBatch]:
        """Collate into micro-batches and attach the no-grad scores they need (old, reference)."""
        tc = self.cfg.trainer
        micro = micro_batches(samples, tc.micro_batch_size, tc.max_tokens_per_micro_batch, self.device, self.pad_id)
        if self.routing is not None:
            attach_routing(micro, samples, tc.micro_batch_size, tc.max_tokens_per_micro_batch, self.routing)
        for mb in micro:
            if with_old_logp:
                mb.old_logp = self._score(self.model, mb)
            if self.ref_model is not None:
                mb.ref_logp = self._score(self.ref_model, mb)
            elif self.lora is not None and self.cfg.trainer.loss.kl_coef > 0:
                with self.model.disable_adapter():
                    mb.ref_logp = self._score(self.model, mb)
        return micro

    def _accumulate(self, micro: list[MicroBatch]) -> dict[str, float]:
        """Forward/backward every micro-batch of one mini-batch; grads accumulate in .grad.

        Returns the mini-batch loss and token sums for the metrics (divided by the token
        count in `summarize_step`).
        """
        n_samples = sum(mb.num_samples for mb in micro)
        n_tokens = float(sum(mb.mask.sum().item() for mb in micro))
        sums = dict.fromkeys(losses.PolicyLoss.METRICS, 0.0)
        for dropout in self.lora_dropouts:
            dropout.train()
        try:
            for mb in micro:
                self._accumulate_one(mb, n_samples, n_tokens, sums)
        finally:
            for dropout in self.lora_dropouts:
                dropout.eval()
        sums["tokens"] = n_tokens
        return sums

    def _accumulate_one(self, mb: MicroBatch, n_samples: int, n_tokens: float, sums: dict[str, float]) -> None:
        logp, entropy = self._token_scores(self.model, mb, with_entropy=True)
        loss, metrics = self.policy_loss(logp, entropy, mb, n_samples, n_tokens)
        if loss.requires_grad:
            loss.backward()
        for key, value in metrics.items():
            sums[key] += float(value)

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
        metrics = run_minibatches(
            samples, self.cfg.trainer.minibatches, prepare=self._prepare, accumulate=self._accumulate,
            zero_grads=lambda: self.optimizer.zero_grad(set_to_none=True), optimizer_step=self._optimizer_step,
            lr=lambda: self.optimizer.param_groups[0]["lr"])
        if self.routing is not None:
            metrics.update(self.routing.take_metrics())
        return metrics

    def offload(self) -> dict[str, float]:
        return self.host_offload.offload()

    def onload(self) -> dict[str, float]:
        return self.host_offload.onload()

    def export_hf_state_dict(self) -> dict[str, Tensor]:
        """CPU copies in model.dtype, under HF checkpoint names (MoE experts one by one, tandem.moe); a tied
        weight (lm_head = embed_tokens) is kept once, under the name HF's loader restores it from, because
        safetensors refuses aliased tensors."""
        return to_checkpoint_names(self._hf_tensors(copy=True))

    def publish_view(self) -> dict[str, Tensor]:
        # A CPU trainer in the published dtype hands its parameters to the writer as they are:
        # the copy cost a full pass over the weights per publish, for a dict dropped right after.
        return to_checkpoint_names(self._hf_tensors(copy=False))

    def _hf_tensors(self, copy: bool) -> dict[str, Tensor]:
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
            out[name] = t.detach().to("cpu", dtype=self.export_dtype if t.is_floating_point() else t.dtype, copy=copy)
        return out

    def export_adapter(self) -> dict[str, Tensor]:
        """The LoRA adapter as peft saves it (adapter_model.safetensors names), CPU copies in model.dtype."""
        from peft import get_peft_model_state_dict

        # save_embedding_layers=False: an adapter on a tied lm_head must not carry the base embedding
        # along (peft would save it; the engines hold it already).
        return {k: v.detach().to("cpu", dtype=self.export_dtype, copy=True)
                for k, v in get_peft_model_state_dict(self.model, save_embedding_layers=False).items()}

    def state_dict_for_checkpoint(self) -> dict:
        # With LoRA only the adapter trains: the frozen base is the model at model.path, not saved again.
        params = self.model.state_dict() if self.lora is None else \
            {n: p for n, p in self.model.named_parameters() if p.requires_grad}
        return {
            "model": {k: v.detach().cpu().clone() for k, v in params.items()},
            "optimizer": self.optimizer.state_dict(),
            "optimizer_steps": self.optimizer_steps,
            "lora": lora_settings(self.lora),
        }

    def load_checkpoint_state(self, state: dict) -> None:
        check_lora_settings(state, self.lora)
        result = self.model.load_state_dict(state["model"], strict=self.lora is None)
        trainable = {n for n, p in self.model.named_parameters() if p.requires_grad}
        missing = [k for k in result.missing_keys if k in trainable]
        if self.lora is not None and (missing or result.unexpected_keys):
            raise ValueError(f"the checkpoint's adapter does not fit this model: missing {missing[:4]}, "
                             f"unexpected {result.unexpected_keys[:4]}")
        self.optimizer.load_state_dict(state["optimizer"])
        self.optimizer_steps = int(state["optimizer_steps"])


def with_lora_adapters(model: torch.nn.Module, lora) -> torch.nn.Module:
    """The model wrapped by peft with trainer.lora's adapters: base weights frozen, only lora_A/B train.
    Only linear layers may be targets (what SGLang and tandem's engines apply adapters to)."""
    from peft import LoraConfig, get_peft_model

    names = {n.rsplit(".", 1)[-1]: type(m).__name__ for n, m in model.named_modules()}
    not_linear = {t: names[t] for t in lora.target_modules if t in names and names[t] != "Linear"}
    missing = [t for t in lora.target_modules if t not in names]
    if missing or not_linear:
        raise ValueError(f"config key 'trainer.lora.target_modules': {missing or ''} not in the model "
                         f"{'and ' if missing and not_linear else ''}{not_linear or ''} not linear layers; "
                         f"linear layers of this model: {sorted(t for t, kind in names.items() if kind == 'Linear')}")
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout,
                        target_modules=list(lora.target_modules), bias="none", task_type="CAUSAL_LM")
    return get_peft_model(model, config)
