"""The Megatron backend's memory features on CPU (gloo), each against the path it replaces, in fp32.

- the chunked loss head (trainer.logprob_chunk_tokens) and packed micro-batches
  (trainer.max_tokens_per_micro_batch) against the whole head on padded micro-batches: the same
  loss, metrics and finalized gradient (tolerances in the test), at TP = 1 and at TP = 2
  (vocab-parallel chunks, packed rows through megatron-core's PackedSeqParams and tandem's SDPA
  attention);
- megatron-core's HybridDeviceOptimizer (trainer.megatron.optimizer_cpu_offload), run on CPU by
  the shim (tandem/trainer/megatron_cpu_shim.py, point 5): its update against torch's fused AdamW
  on the same gradients (bitwise) and the on-device AdamW (1e-6), and whole train steps with it
  against the on-device optimizer; a checkpoint of the offloaded optimizer resumes bitwise.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from tandem.config import build_config
from tandem.model_source import resolve_model_path
from tandem.ports import free_port

pytest.importorskip("megatron.core")

TRAINER = {"micro_batch_size": 3, "minibatches": 2, "lr": 3e-3, "grad_clip": 0.0, "weight_decay": 0.1,
           "loss": {"kl_coef": 0.1, "entropy_coef": 0.01, "tis": True}}


def make_cfg(cache_dir: str, tp: int = 1, **megatron):
    return build_config({
        "run": {"cache_dir": cache_dir, "seed": 0},
        "trainer": {"backend": "megatron", "device": "cpu", **json.loads(json.dumps(TRAINER)),
                    "megatron": {"tensor_parallel": tp, **megatron}},
        "rollout": {"sampling": {"temperature": 0.9}}})


@pytest.mark.parametrize("megatron,cause", [
    ({"exp_avg_dtype": "bfloat16"}, "trainer.megatron.exp_avg_dtype = 'bfloat16' cannot run on this stack"),
    ({"exp_avg_sq_dtype": "float16"}, "trainer.megatron.exp_avg_sq_dtype = 'float16' cannot run on this stack"),
    ({"context_parallel": 2}, "trainer.megatron.context_parallel = 2 cannot run on this stack"),
    ({"precision_aware_optimizer": True}, "precision_aware_optimizer needs trainer.megatron.optimizer_cpu_offload"),
    ({"optimizer_cpu_offload": True}, "optimizer_cpu_offload needs trainer.megatron.precision_aware_optimizer"),
    ({"optimizer_cpu_offload": True, "precision_aware_optimizer": True, "use_distributed_optimizer": False},
     "need trainer.megatron.use_distributed_optimizer = true"),
    ({"main_grads_dtype": "bfloat16"}, "main_grads_dtype = 'bfloat16' needs trainer.megatron.precision_aware_optimizer"),
    ({"optimizer_cpu_offload": True, "precision_aware_optimizer": True, "optimizer_offload_fraction": 1.5},
     "optimizer_offload_fraction"),
])
def test_the_config_refuses_by_name_what_this_stack_cannot_run(megatron, cause):
    """megatron-core 0.16.1 without Transformer Engine: each refusal names the key and the reason."""
    from tandem.config import ConfigError

    with pytest.raises(ConfigError, match=re.escape(cause)):
        build_config({"trainer": {"backend": "megatron", "megatron": megatron}})
    ok = build_config({"trainer": {"backend": "megatron", "megatron": {
        "optimizer_cpu_offload": True, "precision_aware_optimizer": True, "main_grads_dtype": "bfloat16",
        "optimizer_offload_fraction": 0.25}}})
    assert ok.trainer.megatron.optimizer_offload_fraction == 0.25


def make_batch():
    from test_megatron_cpu import make_batch as batch  # 8 samples, 4 groups, varied lengths, a multi-turn mask

    return batch()


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("cache"))
    resolve_model_path(make_cfg(path))  # build the tiny model once, before ranks race
    return path


def _env(rank: int, world: int, port: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), TANDEM_TORCH_THREADS="1")
    import warnings

    warnings.filterwarnings("ignore")


def step_at_lr0(trainer, read=None) -> tuple[dict, list[dict]]:
    """One train step at lr 0 (the weights stay): its metrics and, per optimizer step, the finalized
    gradient the optimizer received (HF names, gathered over TP; `read` picks another export)."""
    for group in trainer.optimizer.param_groups:
        group["lr"] = 0.0
    seen: list[dict] = []
    read = read or trainer.export_hf_grads
    handle = trainer.optimizer.optimizer.register_step_pre_hook(lambda *_: seen.append(read()))
    try:
        return trainer.train_step(make_batch()), seen
    finally:
        handle.remove()


# --------------------------------------------------------------------------- chunked head, packed micro-batches
def _head_worker(rank: int, world: int, port: int, cache_dir: str, out_dir: str) -> None:
    _env(rank, world, port)
    from tandem.trainer.megatron_backend import MegatronTrainer

    trainer = MegatronTrainer(make_cfg(cache_dir, tp=world))
    tc = trainer.cfg.trainer
    results = {}
    for packed, chunk in [(0, 0), (20, 0), (0, 5), (20, 5)]:
        tc.max_tokens_per_micro_batch, tc.logprob_chunk_tokens = packed, chunk
        metrics, grads = step_at_lr0(trainer)
        results[(packed, chunk)] = {"metrics": metrics, "grads": grads}
    if rank == 0:
        torch.save(results, Path(out_dir) / "head.pt")
    trainer.close()


@pytest.mark.timeout(400)
@pytest.mark.parametrize("world", [1, 2], ids=["tp1", "tp2"])
def test_chunked_head_and_packed_micro_batches_equal_the_whole_head_on_padded_ones(tmp_path, cache_dir, world):
    """Every loss term on, two mini-batches of 4 samples: micro-batches of 3 + 1 padded samples, or packed
    up to 20 tokens (the batch's samples are 5-13 tokens: 2-3 per row); the loss head whole, or in chunks
    of 5 positions (TP = 2: the vocab-parallel log-probs and entropy per chunk).
    - chunked head, padded: the loss and metrics within 1e-6 relative, each optimizer step's finalized
      gradient within 1e-6 of its largest element, per tensor (seen: 2.5e-7);
    - packed: the loss and metrics within 1e-6, the gradients within 3e-6 relative in L2 per tensor (seen:
      1.3e-6 at TP = 1, the same on every tensor: fp32 summation order of matmuls and attention over a
      [1, 20] row instead of [3, 13] rows; a sample attending across its neighbour, or a per-sample mean
      taken over the row, is off by 1e-2 and more)."""
    import torch.multiprocessing as mp

    mp.spawn(_head_worker, args=(world, free_port(), cache_dir, str(tmp_path)), nprocs=world, join=True)
    res = torch.load(tmp_path / "head.pt")
    ref = res[(0, 0)]
    assert len(ref["grads"]) == 2 and max(g.abs().max() for g in ref["grads"][0].values()) > 0
    for (packed, chunk), got in res.items():
        for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ppo_kl", "logprob_mismatch", "tokens"):
            tol = dict(rel=1e-6, abs=1e-9) if not packed else dict(rel=0, abs=1e-6)
            assert got["metrics"][key] == pytest.approx(ref["metrics"][key], **tol), (packed, chunk, key)
        for step_ref, step_got in zip(ref["grads"], got["grads"]):
            assert set(step_ref) == set(step_got)
            if packed:
                worst = max(((step_got[k] - g).norm() / g.norm().clamp_min(1e-30)).item() for k, g in step_ref.items())
                assert worst <= 3e-6, (packed, chunk, worst)
            else:
                worst = max(((step_got[k] - g).abs().max() / g.abs().max().clamp_min(1e-30)).item()
                            for k, g in step_ref.items())
                assert worst <= 1e-6, (packed, chunk, worst)


def _lora_worker(rank: int, world: int, port: int, cache_dir: str, out_dir: str) -> None:
    _env(rank, world, port)
    from tandem.trainer.megatron_backend import MegatronTrainer

    cfg = make_cfg(cache_dir, tp=world)
    cfg.trainer.lora.rank, cfg.trainer.lora.target_modules = 4, ["q_proj", "lm_head"]
    trainer = MegatronTrainer(cfg)
    for adapter in trainer.adapters:  # B = 0 at init: make every adapter act, so its gradient depends on A too
        for part in adapter.parts.values():
            torch.nn.init.normal_(part.lora_B, std=0.05)
    results = {}
    for chunk in (0, 5):
        trainer.cfg.trainer.logprob_chunk_tokens = chunk
        results[chunk] = step_at_lr0(trainer, trainer.export_adapter_grads)
    if rank == 0:
        torch.save(results, Path(out_dir) / "lora.pt")
    trainer.close()


@pytest.mark.timeout(400)
def test_chunked_head_keeps_a_lora_adapter_on_lm_head(tmp_path, cache_dir):
    """A LoRA adapter on lm_head (a forward hook on Megatron's output layer) is in the chunked head too:
    the adapters' gradients, lm_head's among them, equal the whole head's within 1e-6 relative (TP = 2)."""
    import torch.multiprocessing as mp

    mp.spawn(_lora_worker, args=(2, free_port(), cache_dir, str(tmp_path)), nprocs=2, join=True)
    res = torch.load(tmp_path / "lora.pt")
    (_, whole), (_, chunked) = res[0], res[5]
    head_keys = [k for k in whole[0] if "lm_head" in k]
    assert head_keys and all(whole[0][k].abs().max() > 0 for k in head_keys)
    for step_whole, step_chunked in zip(whole, chunked):
        for k, g in step_whole.items():
            assert (step_chunked[k] - g).abs().max() <= 1e-6 * g.abs().max(), k


# --------------------------------------------------------------------------- optimizer offload
def test_hybrid_device_optimizer_update_equals_the_on_device_adamw():
    """megatron-core's HybridDeviceOptimizer as megatron builds it (half the parameters offloaded, one CPU
    AdamW per parameter with the D2H/H2D overlap): after three steps on the same gradients, every
    parameter equals torch's fused AdamW's bitwise (what it runs on both sides), and the on-device
    (unfused) AdamW's within 1e-6 relative (seen: one ulp of some weights)."""
    from tandem.trainer.megatron_cpu_shim import device_stand_ins, hybrid_device_optimizer

    g = torch.Generator().manual_seed(0)
    shapes = [(64, 32), (32,), (16, 64), (8,)]
    start = [torch.randn(s, generator=g) for s in shapes]
    grads = [[torch.randn(s, generator=g) for s in shapes] for _ in range(3)]

    def run(make):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        groups = [{"params": params[::2], "weight_decay": 0.1}, {"params": params[1::2], "weight_decay": 0.0}]
        opt, devices = make(groups, params)
        for step in grads:
            for p, grad in zip(params, step):
                p.grad = grad.clone()
            with devices():
                opt.step()
        return opt, params

    hyper = dict(lr=1e-2, betas=(0.9, 0.99), eps=1e-8)
    hybrid, offloaded = run(lambda groups, params: (hybrid_device_optimizer(
        groups, params, weight_decay=0.1, offload_fraction=0.5, overlap=True, **hyper),
        lambda: device_stand_ins(params)))
    assert hybrid.cpu_optimizers and hybrid.gpu_optimizer is not None  # both sides really ran
    assert 0 < len(hybrid.gpu_params_map_cpu_copy) < len(shapes)
    _, fused = run(lambda groups, params: (torch.optim.AdamW(groups, fused=True, **hyper), torch.no_grad))
    _, plain = run(lambda groups, params: (torch.optim.AdamW(groups, **hyper), torch.no_grad))
    for a, b, c, s in zip(offloaded, fused, plain, start):
        assert torch.equal(a, b)
        torch.testing.assert_close(a, c, rtol=1e-6, atol=1e-9)  # fused vs unfused AdamW: an ulp of the weight


def _offload_worker(rank: int, world: int, port: int, cache_dir: str, out_dir: str, offload: bool) -> None:
    _env(rank, world, port)
    from tandem.trainer.megatron_backend import MegatronTrainer

    features = {"optimizer_cpu_offload": True, "precision_aware_optimizer": True, "optimizer_offload_fraction": 0.5,
                "overlap_cpu_optimizer_d2h_h2d": True} if offload else {}
    trainer = MegatronTrainer(make_cfg(cache_dir, tp=world, **features))
    res: dict = {"optimizer": type(trainer.optimizer.optimizer).__name__}
    trainer.train_step(make_batch())
    res["metrics"] = trainer.train_step(make_batch()[::-1])
    res["export"] = trainer.export_hf_state_dict()
    state = trainer.state_dict_for_checkpoint()
    trainer.train_step(make_batch())
    first = trainer.export_hf_state_dict()
    trainer.load_checkpoint_state(state)
    trainer.train_step(make_batch())
    second = trainer.export_hf_state_dict()
    res["resume_bitwise"] = set(first) == set(second) and all(torch.equal(first[k], second[k]) for k in first)
    if rank == 0:
        torch.save(res, Path(out_dir) / f"offload_{offload}.pt")
    trainer.close()


@pytest.mark.timeout(400)
def test_offloaded_optimizer_trains_like_the_on_device_one_and_resumes(tmp_path, cache_dir):
    """Two train steps (four AdamW steps, weight decay on) at TP = 2 over two ranks, with half of the optimizer
    in megatron-core's HybridDeviceOptimizer and without: the weights move the same way (per tensor, relative L2
    of the update difference < 1e-5), the metrics agree, and a checkpoint taken with the offloaded
    optimizer restores it exactly (the next step is bitwise the same)."""
    import torch.multiprocessing as mp

    base = tmp_path / "base"
    base.mkdir()
    src = resolve_model_path(make_cfg(cache_dir))
    from safetensors.torch import load_file

    before = load_file(str(Path(src) / "model.safetensors"))
    for offload in (False, True):
        mp.spawn(_offload_worker, args=(2, free_port(), cache_dir, str(tmp_path), offload), nprocs=2, join=True)
    dev, off = torch.load(tmp_path / "offload_False.pt"), torch.load(tmp_path / "offload_True.pt")
    assert (dev["optimizer"], off["optimizer"]) == ("AdamW", "HybridDeviceOptimizer")
    assert off["resume_bitwise"]
    for key in ("loss", "kl", "entropy", "logprob_mismatch"):
        assert off["metrics"][key] == pytest.approx(dev["metrics"][key], rel=1e-5, abs=1e-7), key
    assert off["metrics"]["grad_norm"] == pytest.approx(dev["metrics"]["grad_norm"], rel=1e-5)
    moved = 0.0
    for k, w in dev["export"].items():
        update = w - before[k].float()
        moved = max(moved, update.abs().max().item())
        assert ((off["export"][k] - w).norm() / update.norm().clamp_min(1e-30)).item() < 1e-5, k
    assert moved > 1e-3  # it did train
