"""Megatron-core trainer backend: a GPTModel for the Llama/Qwen family across trainer.gpus ranks.

Launched by torchrun (see `trainer_launch_command`), one process per trainer GPU; every
rank runs the same loop in `tandem.trainer.__main__`, and only global rank 0 publishes
weights and writes results. Parallel layout: TP x PP from `trainer.megatron`, DP = the rest.

Numbers match the torch backend by construction:
- the batch layout (`collate`: right padding, shifted [b, L-1] per-token tensors) and the
  per-micro-batch loss are the torch backend's, and every formula (policy loss, KL, TIS,
  aggregation, metrics) is a `tandem.losses` call - no second copy of the math;
- the loss of a micro-batch is normalized by the *mini-batch* totals across all DP ranks
  and multiplied by the DP size, because Megatron averages gradients over DP: the
  accumulated gradient is then exactly that of one big forward;
- with TP > 1 the logits are vocab-parallel ([b, L, V/tp] per rank). Log-probs and entropy
  are computed without gathering the vocab (max / sum-exp / target logit all-reduced over
  TP, as Megatron's own vocab-parallel cross entropy does), then handed to the same
  `tandem.losses` functions; at TP = 1 `losses.token_logprobs` / `entropy_from_logits`
  are called directly. The padded vocab rows never get probability mass (masked to -inf).

Devices: on CUDA this uses megatron.core's DistributedDataParallel, distributed optimizer
and bf16 (Float16Module, fp32 main params). Without CUDA it uses `megatron_cpu_shim`
(fp32, gloo, plain AdamW with Megatron's param groups and TP-aware clipping), which is how
the tests run it. Attention is torch SDPA (flash / memory-efficient kernels on GPU) wrapped
as Megatron's core attention, because megatron-core's local attention materializes the
full [s, s] score matrix and Transformer Engine is not part of this stack.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor

from tandem import losses
from tandem.ports import free_port
from tandem.config import TandemConfig
from tandem.model_source import resolve_model_path
from tandem.sample import Sample
from tandem.trainer import megatron_convert as conv
from tandem.trainer import megatron_cpu_shim as shim
from tandem.trainer.backend import TrainerBackend, summarize_step
from tandem.trainer.torch_backend import MicroBatch, chunks, collate, configure_threads, split_even, validate_samples


# --------------------------------------------------------------------------- launch
def trainer_launch_command(cfg: TandemConfig, run_config_path: str | os.PathLike, nproc: int | None = None,
                           master_port: int | None = None, extra_args: list[str] | None = None) -> list[str]:
    """torchrun command for the Megatron trainer: one process per trainer GPU, rendezvous on loopback.

    `python -m torch.distributed.run` is torchrun without relying on PATH. The launcher sets
    CUDA_VISIBLE_DEVICES to the trainer's GPUs (tandem.placement), so local ranks 0..n-1
    map onto exactly those devices.
    """
    n = nproc if nproc is not None else cfg.trainer.gpus
    mp = cfg.trainer.megatron
    if n % (mp.tensor_parallel * mp.pipeline_parallel):
        raise ValueError(f"trainer.gpus={n} is not a multiple of trainer.megatron.tensor_parallel="
                         f"{mp.tensor_parallel} x pipeline_parallel={mp.pipeline_parallel}")
    port = master_port if master_port is not None else free_port()
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node-rank", "0",
            "--nproc-per-node", str(n), "--master-addr", "127.0.0.1", "--master-port", str(port),
            "-m", "tandem.trainer", "--run-config", str(run_config_path), *(extra_args or [])]


# --------------------------------------------------------------------------- model building
def _sdpa_core_attention_cls():
    """Megatron core attention that runs torch SDPA (causal), a drop-in for DotProductAttention."""
    from megatron.core.transformer.dot_product_attention import DotProductAttention

    class SDPACoreAttention(DotProductAttention):
        """Inputs [s, b, heads, d] as Megatron passes them; output [s, b, heads_per_partition * d].

        Causality comes from `is_causal`: tandem batches are right-padded, so padding only
        ever follows the real tokens and a causal mask is the whole mask.
        """

        def forward(self, query, key, value, attention_mask, attn_mask_type=None, attention_bias=None,
                    packed_seq_params=None):
            if packed_seq_params is not None or attention_bias is not None:
                raise NotImplementedError("SDPA core attention supports plain causal attention only")
            q, k, v = (t.permute(1, 2, 0, 3) for t in (query, key, value))  # [b, h, s, d]
            rep = q.shape[1] // k.shape[1]
            if rep > 1:
                k = k.repeat_interleave(rep, dim=1)
                v = v.repeat_interleave(rep, dim=1)
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.softmax_scale)
            s, b = out.shape[2], out.shape[0]
            return out.permute(2, 0, 1, 3).reshape(s, b, self.hidden_size_per_partition)

    return SDPACoreAttention


def transformer_config(shape: conv.ModelShape, tp: int, pp: int, *, bf16: bool, cpu: bool, recompute: bool):
    from megatron.core.transformer.transformer_config import TransformerConfig

    dtype = torch.bfloat16 if bf16 else torch.float32
    kw: dict[str, Any] = {}
    if recompute:
        kw.update(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1)
    return TransformerConfig(
        num_layers=shape.num_layers, hidden_size=shape.hidden_size, num_attention_heads=shape.num_heads,
        num_query_groups=shape.num_kv_heads, kv_channels=shape.head_dim, ffn_hidden_size=shape.ffn_hidden_size,
        gated_linear_unit=True, activation_func=F.silu, normalization="RMSNorm", layernorm_epsilon=shape.rms_eps,
        add_bias_linear=False, add_qkv_bias=shape.qkv_bias, qk_layernorm=shape.qk_norm,
        hidden_dropout=0.0, attention_dropout=0.0,  # the trainer must score tokens like the engines
        bias_dropout_fusion=False, apply_rope_fusion=False, masked_softmax_fusion=False, persist_layer_norm=False,
        # perform_initialization must stay on even though HF weights overwrite the values: it is
        # also what tags TP-sharded params (tensor_model_parallel, partition_dim), which grad
        # norms, the distributed optimizer and our loader check rely on.
        gradient_accumulation_fusion=False, use_cpu_initialization=cpu, perform_initialization=True,
        params_dtype=torch.float32, bf16=bf16, pipeline_dtype=dtype, autocast_dtype=dtype,
        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp, sequence_parallel=False,
        # Micro-batches differ in length: the pipeline schedule must send shapes along. The MoE
        # dispatcher setting only silences a config check (dense models have no MoE).
        variable_seq_lengths=True, moe_token_dispatcher_type="alltoall", **kw,
    )


def build_gpt_model(shape: conv.ModelShape, tconfig, pre_process: bool, post_process: bool):
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.models.gpt.gpt_model import GPTModel

    spec = get_gpt_layer_local_spec(qk_layernorm=shape.qk_norm, normalization="RMSNorm")
    spec.submodules.self_attention.submodules.core_attention = _sdpa_core_attention_cls()
    return GPTModel(
        tconfig, spec, vocab_size=shape.padded_vocab_size, max_sequence_length=shape.max_position_embeddings,
        pre_process=pre_process, post_process=post_process,
        share_embeddings_and_output_weights=shape.tie_embeddings, position_embedding_type="rope",
        rotary_percent=1.0, rotary_base=shape.rope_theta,
    )


def layer_offset(model) -> int:
    """Global index of this stage's first layer (Megatron's layer_number is global and 1-based)."""
    layers = model.decoder.layers
    return layers[0].layer_number - 1 if len(layers) else 0


def global_name(local: str, offset: int) -> str:
    layer, rest = conv.split_layer_name(local)
    return local if layer is None else conv.layer_name(layer + offset, rest)


class HFReader:
    """Lazy, name-addressed reads from an HF safetensors checkpoint (single file or sharded)."""

    def __init__(self, model_dir: str | os.PathLike):
        from safetensors import safe_open

        root = Path(model_dir)
        index = root / "model.safetensors.index.json"
        if index.exists():
            weight_map = json.loads(index.read_text())["weight_map"]
        elif (root / "model.safetensors").exists():
            weight_map = None
        else:
            raise FileNotFoundError(f"{root}: no model.safetensors(.index.json); the Megatron backend loads HF safetensors")
        self._handles: dict[str, Any] = {}
        self._open = lambda f: self._handles.setdefault(f, safe_open(str(root / f), framework="pt"))
        self._map = weight_map
        self.names = set(weight_map) if weight_map else set(self._open("model.safetensors").keys())

    def __call__(self, name: str) -> Tensor:
        if name not in self.names:
            raise KeyError(f"HF checkpoint has no tensor {name!r}")
        return self._open(self._map[name] if self._map else "model.safetensors").get_tensor(name)


@torch.no_grad()
def load_hf_into(model, reader: Callable[[str], Tensor], shape: conv.ModelShape, tp_rank: int, tp: int) -> None:
    """Copy HF weights into this rank's (unwrapped) GPTModel; every parameter must be covered."""
    offset = layer_offset(model)
    expected = set(conv.megatron_param_names(shape, range(offset, offset + len(model.decoder.layers)),
                                             model.pre_process, model.post_process))
    seen = set()
    for local, param in model.named_parameters():
        name = global_name(local, offset)
        if name not in expected:
            raise conv.ConversionError(f"Megatron parameter {name!r} has no HF source in the converter")
        kind = conv.tp_split_kind(name)
        tagged = getattr(param, "tensor_model_parallel", False)
        if tp > 1 and (tagged != (kind != "replicated") or
                       (tagged and param.partition_dim != (1 if kind == "cols" else 0))):
            raise conv.ConversionError(f"{name}: the converter splits it as {kind!r} but Megatron's parameter is "
                                       f"tagged tensor_model_parallel={tagged}, "
                                       f"partition_dim={getattr(param, 'partition_dim', None)}")
        value = conv.hf_to_megatron_shard(name, reader, shape, tp_rank, tp)
        if tuple(value.shape) != tuple(param.shape):
            raise conv.ConversionError(f"{name}: HF gives shape {tuple(value.shape)}, Megatron expects {tuple(param.shape)}")
        param.copy_(value.to(param.dtype))
        seen.add(name)
    if seen != expected:
        raise conv.ConversionError(f"Megatron parameters not loaded: {sorted(expected - seen)}")


# --------------------------------------------------------------------------- vocab-parallel scoring
def vocab_parallel_logprobs(logits: Tensor, targets: Tensor, temperature: float, vocab_size: int,
                            with_entropy: bool) -> tuple[Tensor, Tensor | None]:
    """Per-token log p(target) at `temperature`, and entropy of the untempered softmax, from
    vocab-parallel logits [..., V_padded/tp] - without gathering the vocab.

    Same definitions as `losses.token_logprobs` / `losses.entropy_from_logits` (which the
    TP = 1 path calls directly); the tests check the two agree. Padded vocab columns are
    -inf. Differentiable: the all-reduces are Megatron's reduce_from_tensor_model_parallel_region
    (all-reduce forward, identity backward), valid because everything after them is
    computed identically on every TP rank.
    """
    from megatron.core import parallel_state as ps
    from megatron.core.tensor_parallel.mappings import reduce_from_tensor_model_parallel_region as tp_sum

    group = ps.get_tensor_model_parallel_group()
    part = logits.shape[-1]
    start = ps.get_tensor_model_parallel_rank() * part
    valid = (torch.arange(start, start + part, device=logits.device) < vocab_size)

    def lse_parts(x: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        x = x.masked_fill(~valid, float("-inf"))
        gmax = x.detach().max(dim=-1).values
        dist.all_reduce(gmax, op=dist.ReduceOp.MAX, group=group)
        shifted = torch.exp(x - gmax.unsqueeze(-1))
        total = tp_sum(shifted.sum(-1))
        return x, gmax, shifted, total  # type: ignore[return-value]

    x = logits.float()
    xt = x / temperature if temperature != 1.0 else x
    xt, gmax, _, total = lse_parts(xt)
    local_t = targets - start
    here = (local_t >= 0) & (local_t < part)
    picked = torch.gather(xt, -1, local_t.clamp(0, part - 1).unsqueeze(-1)).squeeze(-1)
    picked = tp_sum(torch.where(here, picked, torch.zeros_like(picked)))
    logp = picked - (gmax + torch.log(total))
    if not with_entropy:
        return logp, None
    xr, rmax, rexp, rtotal = lse_parts(x)
    # H = logsumexp(x) - sum(p * x). Padded columns have p = 0 and x = -inf: zero x there
    # (not the product, whose backward would be 0 * inf = nan).
    px = tp_sum((rexp * xr.masked_fill(~valid, 0.0)).sum(-1))
    entropy = (rmax + torch.log(rtotal)) - px / rtotal
    return logp, entropy


# --------------------------------------------------------------------------- the backend
def _init_distributed(cuda: bool) -> bool:
    """Join (or create) the default process group; returns True when this call created it."""
    if dist.is_initialized():
        return False
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world == 1 and "MASTER_ADDR" not in os.environ:  # started without torchrun: a group of one
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(free_port())
    # One node: keep gloo's and NCCL's bootstrap sockets on loopback. (torchrun's TCPStore on
    # --master-port is torch's own and listens on every interface; clients reach it via 127.0.0.1.)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    os.environ.setdefault("NCCL_SOCKET_IFNAME", "lo")
    if cuda:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    return True


class MegatronTrainer(TrainerBackend):
    def __init__(self, cfg: TandemConfig, model_path: str | None = None):
        from megatron.core import parallel_state as ps

        self.cfg = cfg
        self.loss_cfg = cfg.trainer.loss
        mcfg = cfg.trainer.megatron
        self.cuda = not shim.needed()
        if not self.cuda:
            shim.install()
            configure_threads()
        self._owns_pg = _init_distributed(self.cuda)
        self.device = torch.device("cuda", torch.cuda.current_device()) if self.cuda else torch.device("cpu")
        world = dist.get_world_size()
        tp, pp = mcfg.tensor_parallel, mcfg.pipeline_parallel
        if world % (tp * pp):
            raise ValueError(f"world size {world} is not a multiple of trainer.megatron.tensor_parallel={tp} "
                             f"x pipeline_parallel={pp}")
        if pp > 1 and not self.cuda:
            raise RuntimeError("trainer.megatron.pipeline_parallel > 1 needs CUDA (Megatron's pipeline schedule "
                               "allocates on the GPU); the CPU shim supports TP and DP only")
        if mcfg.recompute and not self.cuda:
            raise RuntimeError("trainer.megatron.recompute needs CUDA (Megatron's activation checkpointing saves "
                               "and restores CUDA RNG states)")
        ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp)
        self.tp, self.pp, self.dp = tp, pp, world // (tp * pp)
        self.tp_rank = ps.get_tensor_model_parallel_rank()
        self.pp_rank = ps.get_pipeline_model_parallel_rank()
        self.dp_rank = ps.get_data_parallel_rank()
        self.rank = dist.get_rank()  # the trainer loop names per-rank checkpoint files by it
        self.is_main_process = self.rank == 0
        if self.cuda:
            from megatron.core.tensor_parallel.random import model_parallel_cuda_manual_seed

            torch.manual_seed(cfg.run.seed)
            model_parallel_cuda_manual_seed(cfg.run.seed)
        else:
            shim.init_rng_tracker(cfg.run.seed)

        self.model_path = model_path or resolve_model_path(cfg)
        hf_config = json.loads((Path(self.model_path) / "config.json").read_text())
        self.shape = conv.shape_from_hf_config(hf_config, tp)
        self.bf16 = mcfg.bf16 and self.cuda  # the CPU shim trains in fp32
        self.tconfig = transformer_config(self.shape, tp, pp, bf16=self.bf16, cpu=not self.cuda,
                                          recompute=mcfg.recompute)
        self.pre_process = ps.is_pipeline_first_stage()
        self.post_process = ps.is_pipeline_last_stage()
        reader = HFReader(self.model_path)
        self.model = self._build_and_load(reader)          # unwrapped GPTModel (names, export)
        self.ref_model = None
        if self.loss_cfg.kl_coef > 0:
            ref = self._build_and_load(reader)
            ref.requires_grad_(False).eval()
            self.ref_model = self._wrap_precision(ref)
        self.export_dtype = getattr(torch, cfg.model.dtype)
        t = cfg.rollout.temperature
        self.temperature = t if t > 0 else 1.0  # same rule as the torch backend
        pad = hf_config.get("pad_token_id")
        self.pad_id = int(pad) if pad is not None else 0
        self.optimizer_steps = 0
        self._setup_optimizer()

    # ------------------------------------------------------------------ setup
    def _build_and_load(self, reader: HFReader):
        model = build_gpt_model(self.shape, self.tconfig, self.pre_process, self.post_process)
        if self.cuda:
            model = model.cuda()
        load_hf_into(model, reader, self.shape, self.tp_rank, self.tp)
        # Train mode like Megatron-LM (recompute only runs in train mode); dropout is 0, so the
        # scores equal eval mode's. The frozen reference model is switched to eval() by its caller.
        model.train()
        return model

    def _wrap_precision(self, model):
        if not self.bf16:
            return model
        from megatron.core.transformer.module import Float16Module

        return Float16Module(self.tconfig, model)  # bf16 compute, fp32 logits out of the last stage

    def _setup_optimizer(self) -> None:
        tc = self.cfg.trainer
        if not self.cuda:
            self.train_model = self.model
            self.optimizer = shim.CpuAdamW(self.model.named_parameters(), lr=tc.lr, betas=tuple(tc.betas),
                                           weight_decay=tc.weight_decay, clip_grad=tc.grad_clip)
            return
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer

        mcfg = tc.megatron
        ddp_config = DistributedDataParallelConfig(
            grad_reduce_in_fp32=True, overlap_grad_reduce=False, overlap_param_gather=False,
            use_distributed_optimizer=mcfg.use_distributed_optimizer)
        self.train_model = DistributedDataParallel(self.tconfig, ddp_config, self._wrap_precision(self.model))
        # clip_grad = 0 makes Megatron skip the norm; a huge bound keeps the metric without clipping.
        clip = tc.grad_clip if tc.grad_clip > 0 else 1e30
        opt_config = OptimizerConfig(
            optimizer="adam", lr=tc.lr, min_lr=tc.lr, weight_decay=tc.weight_decay, adam_beta1=tc.betas[0],
            adam_beta2=tc.betas[1], adam_eps=1e-8, clip_grad=clip, bf16=self.bf16,
            params_dtype=torch.bfloat16 if self.bf16 else torch.float32,
            use_distributed_optimizer=mcfg.use_distributed_optimizer)
        self.optimizer = get_megatron_optimizer(opt_config, [self.train_model])
        # Megatron keeps biases and 1-D params out of weight decay through per-group wd_mult,
        # which Megatron-LM's LR scheduler applies each step. tandem has a constant LR and no
        # scheduler, so apply the multipliers once here (the CPU shim builds the same groups).
        for group in self.optimizer.param_groups:
            group["weight_decay"] = tc.weight_decay * group.get("wd_mult", 1.0)
            group["lr"] = tc.lr * group.get("lr_mult", 1.0)

    # ------------------------------------------------------------------ forward pieces
    def _forward(self, model, mb: MicroBatch) -> Tensor:
        """Model output for a micro-batch: logits [b, L, V_pad/tp] on the last stage."""
        ids = mb.input_ids
        pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0).expand_as(ids)
        return model(ids, pos, None)

    def _scores(self, logits: Tensor, targets: Tensor, with_entropy: bool) -> tuple[Tensor, Tensor | None]:
        """(logp [b, L-1], entropy [b, L-1] or None) of the shifted targets."""
        logits = logits[:, :-1]
        if self.tp == 1:
            logits = logits[..., : self.shape.vocab_size]  # drop padded vocab columns
            logp = losses.token_logprobs(logits, targets, self.temperature)
            return logp, losses.entropy_from_logits(logits) if with_entropy else None
        return vocab_parallel_logprobs(logits, targets, self.temperature, self.shape.vocab_size, with_entropy)

    def _micro_loss(self, mb: MicroBatch, agg: dict, logits: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        """The torch backend's per-micro-batch loss, term for term, on (possibly vocab-parallel) logits.

        Returns the loss to back-propagate (scaled by DP size, see module docstring) and
        token sums for the metrics.
        """
        lc = self.loss_cfg
        want_ent_grad = lc.entropy_coef != 0.0
        logp, _ = self._scores(logits, mb.targets, with_entropy=False)
        old = logp.detach() if mb.old_logp is None else mb.old_logp
        w = losses.tis_weights(old, mb.rollout_logp, high=lc.tis_clip_high) if lc.tis else None
        pg, clipped = losses.policy_loss(logp, old, mb.advantages, mb.mask, lc.eps_clip, lc.eps_clip_high,
                                         lc.dual_clip_c, w)
        pg_loss = losses.aggregate(pg, mb.mask, **agg)
        loss = pg_loss
        sums = {"kl": torch.zeros((), device=logp.device)}
        if mb.ref_logp is not None:
            kl = losses.kl_penalty(logp, mb.ref_logp, lc.kl_estimator)
            loss = loss + lc.kl_coef * losses.aggregate(kl, mb.mask, **agg)
            sums["kl"] = (kl.detach() * mb.mask).sum()
        with torch.set_grad_enabled(want_ent_grad and torch.is_grad_enabled()):
            _, ent = self._scores(logits, mb.targets, with_entropy=True)
        if want_ent_grad:
            loss = loss - lc.entropy_coef * losses.aggregate(ent, mb.mask, **agg)
        sums.update(
            loss=loss.detach(), pg_loss=pg_loss.detach(), entropy=(ent.detach() * mb.mask).sum(),
            clip_frac=clipped.sum(), ppo_kl=((old - logp.detach()) * mb.mask).sum(),
            mismatch=((old - mb.rollout_logp).abs() * mb.mask).sum())
        return loss * self.dp, sums

    # ------------------------------------------------------------------ batching across ranks
    def _micro_batches(self, samples: list[Sample]) -> list[MicroBatch]:
        """This DP rank's share of a mini-batch, as micro-batches (TP/PP peers get the same)."""
        mine = split_even(samples, self.dp)
        share = mine[self.dp_rank] if self.dp_rank < len(mine) else []
        return [collate(c, self.device, self.pad_id) for c in chunks(share, self.cfg.trainer.micro_batch_size)]

    @torch.no_grad()
    def _score_into(self, micro: list[MicroBatch], attr: str, model) -> None:
        """Fill mb.old_logp / mb.ref_logp with a no-grad forward (on the last pipeline stage)."""
        if self.pp == 1:
            for mb in micro:
                setattr(mb, attr, self._scores(self._forward(model, mb), mb.targets, False)[0])
            return
        outs = self._run_schedule(model, micro, forward_only=True,
                                  loss_fn=lambda mb, logits: (logits.sum() * 0.0, {
                                      "logp": self._scores(logits, mb.targets, False)[0]}))
        if self.post_process:
            for mb, out in zip(micro, outs):
                setattr(mb, attr, out["logp"])

    def _run_schedule(self, model, micro: list[MicroBatch], forward_only: bool, loss_fn) -> list[dict]:
        """Megatron's pipeline schedule (PP > 1, CUDA only) over our micro-batches and loss."""
        from megatron.core.pipeline_parallel import get_forward_backward_func

        if not micro:
            raise RuntimeError("a data-parallel rank got no samples; with pipeline parallelism every "
                               "mini-batch needs at least as many samples as data-parallel ranks")
        n = len(micro)
        it = iter(micro)

        def forward_step(data_iterator: Iterator[MicroBatch], m):
            mb = next(data_iterator)
            out = self._forward(m, mb)

            def finish(output):
                loss, stats = loss_fn(mb, output)
                return loss * n, stats  # Megatron divides a 2-tuple loss by num_microbatches

            return out, finish

        return get_forward_backward_func()(
            forward_step_func=forward_step, data_iterator=it, model=[model], num_microbatches=n,
            seq_length=max(mb.input_ids.shape[1] for mb in micro),
            micro_batch_size=max(mb.input_ids.shape[0] for mb in micro), forward_only=forward_only)

    def _accumulate(self, minibatch: list[Sample], micro: list[MicroBatch]) -> dict[str, float]:
        """Forward/backward this rank's micro-batches of one mini-batch; grads accumulate
        (in .grad on CPU, in DDP's buffers on GPU). Returns metric sums over every rank."""
        agg = dict(mode=self.loss_cfg.aggregation, num_samples=len(minibatch),
                   num_tokens=float(sum(sum(s.loss_mask) for s in minibatch)))
        keys = ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ppo_kl", "mismatch")
        totals = torch.zeros(len(keys), dtype=torch.float64, device=self.device)
        if self.pp == 1:
            for mb in micro:
                loss, sums = self._micro_loss(mb, agg, self._forward(self.train_model, mb))
                if loss.requires_grad:
                    loss.backward()
                totals += torch.stack([sums[k].double() for k in keys])
            # What Megatron's schedule calls after the last backward: DP reduction, and the sum
            # over TP of the q/k-layernorm grads (each TP rank only normalizes its own heads).
            if self.cuda:
                from megatron.core.distributed import finalize_model_grads

                finalize_model_grads([self.train_model])
            else:
                self.optimizer.finalize_grads()
        else:
            self.tconfig.finalize_model_grads_func = _finalize_grads
            stats = self._run_schedule(self.train_model, micro, forward_only=False,
                                       loss_fn=lambda mb, logits: self._micro_loss(mb, agg, logits))
            for s in stats:
                totals += torch.stack([s[k].double() for k in keys])
        # Sums live on the last stage, one share per DP rank: add them up on every rank
        # (over DP, then over PP where the other stages contribute zeros).
        from megatron.core import parallel_state as ps

        dist.all_reduce(totals, group=ps.get_data_parallel_group())
        if self.pp > 1:
            dist.all_reduce(totals, group=ps.get_pipeline_model_parallel_group())
        out = dict(zip(keys, totals.tolist()))
        out["tokens"] = agg["num_tokens"]
        return out

    def _zero_grads(self) -> None:
        if self.cuda:
            self.train_model.zero_grad_buffer()
        self.optimizer.zero_grad()

    def _optimizer_step(self) -> tuple[float, bool]:
        ok, norm, _ = self.optimizer.step()
        norm = float(norm) if norm is not None else float("nan")
        if ok:
            self.optimizer_steps += 1
        return norm, bool(ok)

    # ------------------------------------------------------------------ backend API
    def accumulate_gradients(self, samples: list[Sample]) -> dict[str, float]:
        """Zero grads, then forward/backward `samples` as one on-policy mini-batch (no step).

        The torch backend's method of the same name; tests compare the two.
        """
        validate_samples(samples)
        self._zero_grads()
        micro = self._micro_batches(samples)
        if self.ref_model is not None:
            self._score_into(micro, "ref_logp", self.ref_model)
        return self._accumulate(samples, micro)

    def train_step(self, samples: list[Sample]) -> dict[str, float]:
        t0 = time.perf_counter()
        validate_samples(samples)
        if not samples:
            raise ValueError("train_step got an empty batch")
        minibatches = split_even(samples, self.cfg.trainer.minibatches)
        several = len(minibatches) > 1  # see TorchTrainer.train_step: score before the first update
        prepared = []
        for mbatch in minibatches:
            micro = self._micro_batches(mbatch)
            if several:
                self._score_into(micro, "old_logp", self.train_model)
            if self.ref_model is not None:
                self._score_into(micro, "ref_logp", self.ref_model)
            prepared.append((mbatch, micro))
        totals: dict[str, float] = {}
        norms, skipped = [], 0
        for mbatch, micro in prepared:
            self._zero_grads()
            sums = self._accumulate(mbatch, micro)
            for k, v in sums.items():
                totals[k] = totals.get(k, 0.0) + v
            norm, ok = self._optimizer_step()
            norms.append(norm)
            skipped += not ok
        return summarize_step(totals, norms, skipped, len(samples), self.optimizer.param_groups[0]["lr"], t0)

    @torch.no_grad()
    def full_logits(self, input_ids: Tensor) -> Tensor | None:
        """Full-vocab logits [b, L, vocab] (TP-gathered, padding dropped) - for tests and gpu_check.

        Runs on every rank (collective); returns None off the last stage. PP = 1 only.
        """
        from megatron.core.tensor_parallel.mappings import gather_from_tensor_model_parallel_region

        if self.pp != 1:
            raise NotImplementedError("full_logits is a PP = 1 debugging helper")
        mb = MicroBatch(input_ids.to(self.device), None, None, None, None)  # type: ignore[arg-type]
        logits = self._forward(self.train_model, mb).float()
        if self.tp > 1:
            logits = gather_from_tensor_model_parallel_region(logits)
        return logits[..., : self.shape.vocab_size]

    def export_hf_state_dict(self) -> dict[str, Tensor]:
        """Gather TP shards (all-gather in each TP group of DP rank 0) and PP stages (to rank 0);
        rank 0 gets the full HF state dict in model.dtype, every other rank an empty dict."""
        return self._gather_hf(lambda p: p.detach(), self.export_dtype)

    def export_hf_grads(self) -> dict[str, Tensor]:
        """The accumulated gradient in HF names and fp32, gathered like the weights (rank 0 only).

        A debugging / test helper: call after `accumulate_gradients`. On GPU the gradient
        lives in DDP's main_grad buffer (already DP-reduced); on CPU in .grad.
        """
        def grad(p: Tensor) -> Tensor:
            g = getattr(p, "main_grad", None)
            g = p.grad if g is None else g
            return torch.zeros_like(p, dtype=torch.float32) if g is None else g.detach()

        return self._gather_hf(grad, torch.float32)

    def _gather_hf(self, value_of: Callable[[Tensor], Tensor], dtype: torch.dtype) -> dict[str, Tensor]:
        from megatron.core import parallel_state as ps

        out: dict[str, Tensor] = {}
        if self.dp_rank == 0:
            tp_group = ps.get_tensor_model_parallel_group()
            offset = layer_offset(self.model)
            for local, param in self.model.named_parameters():
                name = global_name(local, offset)
                if name == "output_layer.weight" and self.shape.tie_embeddings:
                    continue  # last stage's copy of the tied embedding
                data = value_of(param)
                if self.tp > 1 and conv.tp_split_kind(name) != "replicated":
                    parts = [torch.empty_like(data) for _ in range(self.tp)]
                    dist.all_gather(parts, data.contiguous(), group=tp_group)
                    full = conv.unshard(name, parts)
                else:
                    full = data
                if self.tp_rank == 0:
                    for hf_name, t in conv.megatron_full_to_hf(name, full, self.shape).items():
                        out[hf_name] = t.to("cpu", dtype=dtype, copy=True)
            if self.pp > 1 and self.tp_rank == 0:
                out = self._gather_pipeline(out)
        return out if self.is_main_process else {}

    def _gather_pipeline(self, mine: dict[str, Tensor]) -> dict[str, Tensor]:
        """Send every later stage's tensors to global rank 0 (first stage), one tensor at a time."""
        from megatron.core import parallel_state as ps

        ranks = dist.get_process_group_ranks(ps.get_pipeline_model_parallel_group())
        if self.pp_rank != 0:
            meta = [[(k, tuple(v.shape), str(v.dtype)) for k, v in mine.items()]]
            dist.send_object_list(meta, dst=ranks[0])
            for v in mine.values():
                dist.send(v.to(self.device), dst=ranks[0])
            return {}
        for src in ranks[1:]:
            meta: list[Any] = [None]
            dist.recv_object_list(meta, src=src)
            for name, shape_, dtype in meta[0]:
                buf = torch.empty(shape_, dtype=getattr(torch, dtype.split(".")[-1]), device=self.device)
                dist.recv(buf, src=src)
                mine[name] = buf.cpu()
        return mine

    # ------------------------------------------------------------------ checkpoints (per rank)
    def barrier(self) -> None:
        dist.barrier()

    def state_dict_for_checkpoint(self) -> dict[str, Any]:
        """This rank's shard: its model parameters, its optimizer state, the step counter.

        Resuming needs the same TP/PP/DP layout (the trainer loop saves one file per rank).
        On GPU the distributed optimizer's fp32 main params and Adam moments come from its
        DP-sharded ("dp_reshardable") state; that path is not exercised on CPU.
        """
        opt: dict[str, Any] = {"state_dict": _to_cpu(self.optimizer.state_dict())}
        if self.cuda:
            parts = getattr(self.optimizer, "chained_optimizers", [self.optimizer])
            opt["param_state"] = [_to_cpu(o.get_parameter_state_dp_reshardable())
                                  if hasattr(o, "get_parameter_state_dp_reshardable") else None for o in parts]
        return {"model": {k: v.detach().cpu().clone() for k, v in self.model.state_dict().items()
                          if isinstance(v, Tensor)},
                "optimizer": opt, "optimizer_steps": self.optimizer_steps,
                "layout": {"tp": self.tp, "pp": self.pp, "dp": self.dp}}

    def load_checkpoint_state(self, state: dict[str, Any]) -> None:
        layout = {"tp": self.tp, "pp": self.pp, "dp": self.dp}
        if state["layout"] != layout:
            raise ValueError(f"checkpoint was saved with layout {state['layout']}, this run has {layout}")
        missing, unexpected = self.model.load_state_dict(state["model"], strict=False)
        missing = [k for k in missing if not k.endswith("_extra_state")]
        if missing or unexpected:
            raise ValueError(f"checkpoint does not fit the model: missing {missing}, unexpected {unexpected}")
        self.optimizer.load_state_dict(state["optimizer"]["state_dict"])
        if self.cuda:
            parts = getattr(self.optimizer, "chained_optimizers", [self.optimizer])
            for o, ps_ in zip(parts, state["optimizer"]["param_state"]):
                if ps_ is not None:
                    o.load_parameter_state_from_dp_reshardable(ps_)
        self.optimizer_steps = int(state["optimizer_steps"])

    def close(self) -> None:
        from megatron.core import parallel_state as ps

        ps.destroy_model_parallel()
        if self._owns_pg and dist.is_initialized():
            dist.destroy_process_group()


def _to_cpu(obj: Any) -> Any:
    """Deep copy with every tensor moved to CPU (checkpoints must not hold CUDA tensors)."""
    if isinstance(obj, Tensor):
        return obj.detach().cpu().clone()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_cpu(v) for v in obj)
    return obj


def _finalize_grads(*args, **kwargs):
    """What Megatron's schedule calls after the last backward: DP grad reduction, tied-embedding sync."""
    from megatron.core.distributed import finalize_model_grads

    return finalize_model_grads(*args, **kwargs)
