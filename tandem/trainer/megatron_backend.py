"""Megatron-core trainer backend: a GPTModel for the Llama/Qwen family across trainer.gpus ranks.

Launched by torchrun (see `trainer_launch_command`), one process per trainer GPU; every
rank runs the same loop in `tandem.trainer.__main__`, and only global rank 0 publishes
weights and writes results. Parallel layout: TP x PP from `trainer.megatron`, DP = the rest.

This module assembles the pieces behind the `TrainerBackend` API, one module per seam:
- `megatron_dist`: the torchrun command, process groups, the rank's layout;
- `megatron_model`: the GPTModel, HF weight loading, precision, DDP and optimizer;
- `megatron_step`: the training step, with the torch backend's numbers (see its docstring);
- `megatron_export`: HF weights gathered over TP/PP, per-rank checkpoint state.

Devices: on CUDA this uses megatron.core's DistributedDataParallel, distributed optimizer
and bf16. Without CUDA it uses `megatron_cpu_shim` (fp32, gloo, plain AdamW with
Megatron's param groups and TP-aware clipping), which is how the tests run it.
"""

from __future__ import annotations

import contextlib
import json
import time
from pathlib import Path
from typing import Any, Callable

import torch
import torch.distributed as dist
from torch import Tensor

from tandem.config.views import TrainerView
from tandem.model_source import resolve_model_path
from tandem.sample import Sample
from tandem.trainer import megatron_convert as conv
from tandem.trainer import megatron_export as export
from tandem.trainer import megatron_lora
from tandem.trainer.backend import TrainerBackend, check_lora_settings, lora_settings
from tandem.trainer.megatron_dist import init_parallel, shutdown, trainer_launch_command
from tandem.trainer.megatron_model import (HFReader, build_and_load, build_optimizer, build_reference,
                                           transformer_config)
from tandem.trainer.megatron_routing import megatron_routing_replay
from tandem.trainer.megatron_step import MegatronTrainStep

# trainer_launch_command is imported from here by the launcher (orchestrator.cluster).
__all__ = ["MegatronTrainer", "trainer_launch_command"]


class MegatronTrainer(TrainerBackend):
    def __init__(self, cfg: TrainerView, model_path: str | None = None):
        self.cfg = cfg
        mcfg = cfg.trainer.megatron
        self.layout = init_parallel(mcfg, cfg.run.seed)
        self.model_path = model_path or resolve_model_path(cfg)
        hf_config = json.loads((Path(self.model_path) / "config.json").read_text())
        self.shape = conv.shape_from_hf_config(hf_config, self.layout.tp, ep=self.layout.ep)
        self.bf16 = mcfg.bf16 and self.layout.cuda  # the CPU shim trains in fp32
        self.tconfig = transformer_config(self.shape, self.layout.tp, self.layout.pp, bf16=self.bf16,
                                          cpu=not self.layout.cuda, recompute=mcfg.recompute, ep=self.layout.ep)
        reader = HFReader(self.model_path)
        self.model = build_and_load(self.shape, self.tconfig, self.layout, reader)  # unwrapped: names, export
        self.lora = cfg.trainer.lora if cfg.trainer.lora.enabled else None
        if self.lora is not None and self.shape.moe_layers:
            raise ValueError("config key 'trainer.lora.rank': LoRA on a mixture-of-experts model is not built (the "
                             "engines' LoRA layers do not wrap experts); set trainer.lora.rank = 0")
        self.adapters = [] if self.lora is None else \
            megatron_lora.attach(self.model, self.shape, self.layout, self.lora, cfg.run.seed)
        ref_model = None
        ref_context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext
        if cfg.trainer.loss.kl_coef > 0 and self.lora is None:
            ref_model = build_reference(self.shape, self.tconfig, self.layout, reader, self.bf16)
        self.export_dtype = getattr(torch, cfg.model.dtype)
        self.train_model, self.optimizer = build_optimizer(cfg.trainer, self.model, self.tconfig, self.layout,
                                                           self.bf16)
        if cfg.trainer.loss.kl_coef > 0 and self.lora is not None:
            # The KL reference is the base under the same weights, every adapter off: no second copy.
            ref_model, ref_context = self.train_model, lambda: megatron_lora.disabled(self.adapters)
        moe = cfg.trainer.moe
        routing = megatron_routing_replay(self.model, self.shape, moe.routing_replay) if moe.wants_routing else None
        t = cfg.rollout.sampling.temperature
        pad = hf_config.get("pad_token_id")
        self.step = MegatronTrainStep(
            tc=cfg.trainer, layout=self.layout, tconfig=self.tconfig, train_model=self.train_model,
            ref_model=ref_model, optimizer=self.optimizer, vocab_size=self.shape.vocab_size,
            ref_context=ref_context,
            temperature=t if t > 0 else 1.0,  # same rule as the torch backend
            pad_id=int(pad) if pad is not None else 0, bf16=self.bf16, routing=routing)

    @property
    def rank(self) -> int:  # type: ignore[override]
        return self.layout.rank

    @property
    def is_main_process(self) -> bool:  # type: ignore[override]
        return self.layout.is_main_process

    # ------------------------------------------------------------------ backend API
    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        return self.step(samples)

    @torch.no_grad()
    def full_logits(self, input_ids: Tensor) -> Tensor | None:
        """Full-vocab logits [b, L, vocab] (TP-gathered, padding dropped) - for tests and gpu_check.

        Runs on every rank (collective); returns None off the last stage. PP = 1 only.
        """
        from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

        if self.layout.pp != 1:
            raise NotImplementedError("full_logits is a PP = 1 debugging helper")
        logits = self.step.logits(self.train_model, input_ids.to(self.layout.device)).float()
        if self.layout.tp > 1:
            logits = gather_from_tensor_model_parallel_region(logits)
        return logits[..., : self.shape.vocab_size]

    def export_hf_state_dict(self) -> dict[str, Tensor]:
        """Gather TP shards (all-gather in each TP group of DP rank 0) and PP stages (to rank 0);
        rank 0 gets the full HF state dict in model.dtype, every other rank an empty dict."""
        return export.gather_hf(self.model, self.layout, self.shape, lambda p: p.detach(), self.export_dtype)

    def export_adapter(self) -> dict[str, Tensor]:
        """The LoRA adapter gathered over TP and PP into peft's names, on rank 0 ({} elsewhere)."""
        return megatron_lora.gather_adapter(self.model, self.layout, self.shape, lambda p: p.detach(),
                                            self.export_dtype)

    def export_adapter_grads(self) -> dict[str, Tensor]:
        """The adapters' accumulated gradient, gathered like `export_adapter` (tests, debugging)."""
        return megatron_lora.gather_adapter(self.model, self.layout, self.shape, export.accumulated_grad,
                                            torch.float32)

    def export_hf_grads(self) -> dict[str, Tensor]:
        """The gradient accumulated right now, in HF names and fp32, gathered like the weights.

        For debugging and tests, e.g. from a pre-step hook on the optimizer, where it is the
        finalized (DP-reduced, clipped) gradient the update is about to use. Collective.
        """
        return export.gather_hf(self.model, self.layout, self.shape, export.accumulated_grad, torch.float32)

    def offload(self) -> dict[str, float]:
        """On CUDA, megatron-core's own RL offload: DDP's grad buffers freed, the optimizer's state (fp32
        master weights and Adam's moments) to the host. The bf16 weights stay. On CPU ranks: nothing."""
        if not self.layout.cuda:
            return {}
        t0 = time.perf_counter()
        before = torch.cuda.memory_allocated()
        self.train_model.offload_grad_buffers()
        self.optimizer.offload_to_cpu()
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        after = torch.cuda.memory_allocated()
        return {"trainer_offloaded_mb": (before - after) / 2**20, "trainer_offload_time": time.perf_counter() - t0,
                "trainer_device_memory_mb": after / 2**20}

    def onload(self) -> dict[str, float]:
        if not self.layout.cuda:
            return {}
        t0 = time.perf_counter()
        self.optimizer.restore_from_cpu()
        self.train_model.restore_grad_buffers()
        return {"trainer_onload_time": time.perf_counter() - t0}

    # ------------------------------------------------------------------ checkpoints (per rank)
    def barrier(self) -> None:
        dist.barrier()

    def state_dict_for_checkpoint(self) -> dict[str, Any]:
        state = export.rank_state(self.model, self.optimizer, self.layout, self.step.optimizer_steps,
                                  trainable_only=self.lora is not None)
        return {**state, "lora": lora_settings(self.lora)}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        check_lora_settings(state, self.lora)
        self.step.optimizer_steps = export.load_rank_state(self.model, self.optimizer, self.layout, state,
                                                           trainable_only=self.lora is not None)

    def close(self) -> None:
        shutdown(self.layout)
