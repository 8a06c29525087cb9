"""The Megatron backend on CPU (gloo), against the torch backend on the same tiny Qwen3.

What is real: megatron-core's GPTModel, its TP layers and process groups, our converter,
the vocab-parallel loss, torchrun and the trainer loop. What is adapted: the CPU shim
(tandem/trainer/megatron_cpu_shim.py) - CUDA device redirect, inference RNG tracker and
plain AdamW in place of Megatron's CUDA-only optimizer. bf16, DDP buffers, the
distributed optimizer, activation recompute and pipeline parallelism are GPU-only and not
exercised here (scripts/gpu_check.sh covers the single-GPU path).

Tolerances (fp32 on both sides; measured figures in the comments were observed on this
CPU with torch 2.13.0 / megatron-core 0.16.1):
- converter round trip: tests/test_megatron_convert.py (torch only, runs without megatron-core);
- logits: TP=1 bitwise (0.0 observed), TP=2 atol 1e-5 (row-parallel all-reduce reorders sums);
- loss and per-token metrics: atol 1e-5;
- the shared loss: every `PolicyLoss` call (one per micro-batch) returns the same value, atol 1e-5;
- gradient of the first mini-batch as the optimizer receives it (finalized and clipped, read
  by a pre-step hook on the torch optimizer underneath): max |diff| / max |grad| per tensor
  < 1e-5 (seen: 5.1e-7 TP=1, 1.4e-6 TP=2);
- one train step (2 AdamW steps, lr 3e-3): per tensor, |update difference|_2 / |update|_2
  < 1e-3 (seen: 3.0e-5 TP=1, 5.8e-5 TP=2) and no element off by more than 5% of lr (seen:
  1.7e-5 = 0.6% of lr at TP=1, 3.4e-5 = 1.1% at TP=2). The element bound is loose because
  Adam's first steps divide by |g| + eps: elements whose gradient is at the eps scale
  (~1e-8) turn fp32 summation-order noise into visible update differences; the gradient
  check is the tight one. grad_norm rtol 1e-4 (seen 1e-6);
- export -> HF load: logits identical to the Megatron model's (bitwise at TP=1, atol 1e-5 at TP=2).
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import pytest
import torch

from tandem import losses
from tandem.config import build_config, write_views
from tandem.model_source import load_causal_lm, resolve_model_path
from tandem.sample import Sample

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("megatron.core")


# --------------------------------------------------------------------------- backend vs torch backend
TRAINER = {"micro_batch_size": 3, "minibatches": 2, "lr": 3e-3, "grad_clip": 1.0,
           "loss": {"kl_coef": 0.1, "entropy_coef": 0.01, "tis": True}}


def make_cfg(cache_dir: str, backend: str, tp: int = 1, loss: dict | None = None):
    trainer = json.loads(json.dumps(TRAINER))
    trainer["loss"].update(loss or {})
    return build_config({
        "run": {"cache_dir": cache_dir, "seed": 0},
        "trainer": {"backend": backend, "device": "cpu", **trainer,
                    **({"megatron": {"tensor_parallel": tp}} if backend == "megatron" else {})},
        "rollout": {"sampling": {"temperature": 0.9}},  # tempered log-probs on both sides
    })


def make_batch() -> list[Sample]:
    """8 samples in 4 groups: varied lengths (padding), a multi-turn mask, engine logprobs."""
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(8):
        p = torch.randint(0, 256, (2 + i % 3,), generator=g).tolist()
        r = torch.randint(0, 259, (3 + (i * 3) % 6,), generator=g).tolist()
        mask = [0 if i % 3 == 1 and 1 <= j <= 2 else 1 for j in range(len(r))]
        lp = [(-1.0 - 4.0 * torch.rand((), generator=g).item()) * m for m in mask]
        out.append(Sample(prompt_ids=p, response_ids=r, loss_mask=mask, rollout_logprobs=lp,
                          advantage=float(i % 4 - 1.5), group_id=i // 2))
    return out


PROBE = torch.tensor([[256, 257, 72, 105, 258, 10, 200, 3, 33], [1, 2, 3, 4, 5, 6, 7, 8, 9]])


@contextlib.contextmanager
def first_step_recorded(torch_optimizer: torch.optim.Optimizer, read_grads):
    """While active: the loss of every `PolicyLoss` call, whichever backend makes it, and
    `read_grads()` when `torch_optimizer` first steps, with the number of calls made by then."""
    rec: dict = {"losses": [], "grads": None, "calls_before_step": None}
    original = losses.PolicyLoss.__call__

    def spy(self, *args, **kwargs):
        loss, sums = original(self, *args, **kwargs)
        rec["losses"].append(float(loss.detach()))
        return loss, sums

    def pre_step(optimizer, args, kwargs):
        if rec["grads"] is None:
            rec["grads"] = read_grads()
            rec["calls_before_step"] = len(rec["losses"])

    losses.PolicyLoss.__call__ = spy
    handle = torch_optimizer.register_step_pre_hook(pre_step)
    try:
        yield rec
    finally:
        handle.remove()
        losses.PolicyLoss.__call__ = original


def resumes_bitwise(trainer, state: dict, export) -> bool:
    """Step, restore `state`, step again on the same batch: `export()` gives the same tensors, bitwise."""
    later = make_batch()[::-1]
    trainer.train_step(later)
    first = export()
    trainer.load_checkpoint_state(state)
    trainer.train_step(later)
    second = export()
    return set(first) == set(second) and all(torch.equal(first[k], second[k]) for k in first)


def _worker(rank: int, world: int, port: int, cache_dir: str, tp: int, out_dir: str) -> None:
    """One rank of the Megatron backend: scores, one train step, export; rank 0 saves results."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), TANDEM_TORCH_THREADS="1")
    import warnings

    warnings.filterwarnings("ignore")
    from tandem.trainer.megatron_backend import MegatronTrainer
    from tandem.trainer.megatron_step import vocab_parallel_logprobs

    trainer = MegatronTrainer(make_cfg(cache_dir, "megatron", tp))
    res: dict = {"logits_before": trainer.full_logits(PROBE)}
    if tp > 1:  # the vocab-parallel scores against tandem.losses on the gathered logits
        local = trainer.step.logits(trainer.train_model, PROBE)
        logp, ent = vocab_parallel_logprobs(local[:, :-1], PROBE[:, 1:], 0.9, trainer.shape.vocab_size, True)
        full = res["logits_before"][:, :-1]
        res["vp_logp_err"] = (logp - losses.token_logprobs(full, PROBE[:, 1:], 0.9)).abs().max().item()
        res["vp_ent_err"] = (ent - losses.entropy_from_logits(full)).abs().max().item()
    # The CPU shim's step finalizes and clips, then steps the torch AdamW inside it.
    with first_step_recorded(trainer.optimizer.optimizer, trainer.export_hf_grads) as first_step:
        res["metrics"] = trainer.train_step(make_batch())
    res["first_step"] = first_step
    res["logits_after"] = trainer.full_logits(PROBE)
    res["export"] = trainer.export_hf_state_dict()
    # Checkpoint round trip: save, step, restore, step again -> the same weights, bitwise.
    res["resume_bitwise"] = resumes_bitwise(trainer, trainer.state_dict_for_checkpoint(), trainer.export_hf_state_dict)
    if rank == 0:
        torch.save(res, Path(out_dir) / "result.pt")
    else:
        assert res["export"] == {}
    trainer.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return str(tmp_path_factory.mktemp("cache"))


def torch_reference_step(cfg, batch: list[Sample], named=lambda grads: grads) -> tuple[dict, object]:
    """The torch backend on `cfg`, one train step on `batch`: (logits of PROBE, metrics, the first step's
    record with its gradients passed through `named`, weights before/after; the trainer, to step on)."""
    from tandem.trainer.torch_backend import TorchTrainer

    os.environ["TANDEM_TORCH_THREADS"] = "1"
    trainer = TorchTrainer(cfg)
    with torch.no_grad():
        before_logits = trainer.model(input_ids=PROBE).logits
    before = trainer.export_hf_state_dict()
    with first_step_recorded(trainer.optimizer, lambda: named({n: p.grad.detach().clone()
                                                               for n, p in trainer.model.named_parameters()})) as first:
        metrics = trainer.train_step(batch)
    return {"logits_before": before_logits, "before": before, "first_step": first, "metrics": metrics,
            "after": trainer.export_hf_state_dict()}, trainer


@pytest.fixture(scope="module")
def torch_reference(cache_dir):
    """The torch backend on the same config and batch: logits, metrics, weights before/after."""
    return torch_reference_step(make_cfg(cache_dir, "torch"), make_batch())[0]


def assert_same_first_step(mine: dict, theirs: dict) -> float:
    """Both backends called `PolicyLoss` per micro-batch and got the same values, and the first
    (on-policy) mini-batch, all loss terms on, gave the same gradient; returns its error."""
    assert len(theirs["losses"]) == 4  # 2 mini-batches of 4 samples, micro-batches of 3 + 1
    assert mine["losses"] == pytest.approx(theirs["losses"], abs=1e-5)
    assert mine["calls_before_step"] == theirs["calls_before_step"] == 2
    return assert_same_first_gradient(mine, theirs)


def assert_same_first_gradient(mine: dict, theirs: dict) -> float:
    """The first mini-batch's gradient as the optimizer receives it is the same on both sides, per tensor
    max |diff| / max |grad| < 1e-5 (whatever the data-parallel split); returns that error."""
    assert set(mine["grads"]) == set(theirs["grads"])
    grad_err = max(((mine["grads"][k] - g).abs().max() / g.abs().max()).item() for k, g in theirs["grads"].items())
    assert grad_err < 1e-5, grad_err
    return grad_err


@pytest.mark.timeout(240)
@pytest.mark.parametrize("world,tp", [(1, 1), (2, 2)], ids=["world1", "world2-tp2"])
def test_megatron_backend_matches_torch_backend(tmp_path, cache_dir, torch_reference, world, tp):
    import torch.multiprocessing as mp

    resolve_model_path(make_cfg(cache_dir, "torch"))  # build the tiny model once, before the ranks race
    t0 = time.perf_counter()
    mp.spawn(_worker, args=(world, _free_port(), cache_dir, tp, str(tmp_path)), nprocs=world, join=True)
    res = torch.load(tmp_path / "result.pt")
    ref = torch_reference
    exact = tp == 1
    logit_tol = dict(atol=0.0, rtol=0.0) if exact else dict(atol=1e-5, rtol=0.0)

    assert res["resume_bitwise"], "restoring state_dict_for_checkpoint() did not reproduce the next step"

    # 1. logits of the loaded model, and the vocab-parallel scores
    torch.testing.assert_close(res["logits_before"], ref["logits_before"], **logit_tol)
    if tp > 1:
        assert res["vp_logp_err"] < 1e-5 and res["vp_ent_err"] < 1e-5

    # 2. the same loss, from PolicyLoss on both sides, and the same first-mini-batch gradient
    grad_err = assert_same_first_step(res["first_step"], ref["first_step"])

    # 3. metrics of one train step (two mini-batches)
    m, r = res["metrics"], ref["metrics"]
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "ppo_kl", "logprob_mismatch"):
        assert m[key] == pytest.approx(r[key], abs=1e-5), (key, m[key], r[key])
    assert m["grad_norm"] == pytest.approx(r["grad_norm"], rel=1e-4)
    assert (m["tokens"], m["samples"], m["optimizer_steps"]) == (r["tokens"], r["samples"], r["optimizer_steps"])

    # 4. the weights moved the same way (two AdamW steps of lr 3e-3: updates of ~6e-3)
    export = res["export"]
    assert set(export) == set(ref["after"])
    worst, rel = 0.0, 0.0
    for k in export:
        delta_mg, delta_torch = export[k] - ref["before"][k], ref["after"][k] - ref["before"][k]
        worst = max(worst, (delta_mg - delta_torch).abs().max().item())
        rel = max(rel, ((delta_mg - delta_torch).norm() / delta_torch.norm()).item())
    assert rel < 1e-3, rel  # per tensor, relative L2 norm of the update difference
    assert worst < 0.05 * TRAINER["lr"], worst  # no element off by a sizeable part of a step
    assert max((export[k] - ref["before"][k]).abs().max().item() for k in export) > 1e-3  # it did train

    # 5. export -> HF safetensors (the real publish path) -> from_pretrained: same logits
    from tandem.weights import publish_weights

    src = resolve_model_path(make_cfg(cache_dir, "torch"))
    path = publish_weights(export, src, tmp_path / "run", version=1, keep_last=2)
    hf = load_causal_lm(str(path))
    with torch.no_grad():
        reloaded = hf(input_ids=PROBE).logits
    torch.testing.assert_close(reloaded, res["logits_after"], **logit_tol)
    logit_err = (res["logits_before"] - ref["logits_before"]).abs().max().item()
    reload_err = (reloaded - res["logits_after"]).abs().max().item()
    print(f"\n[{world=} {tp=}] logits err {logit_err:.1e}, export->HF logits err {reload_err:.1e}, "
          f"vp logp/entropy err {res.get('vp_logp_err', 0):.1e}/{res.get('vp_ent_err', 0):.1e}, grad err {grad_err:.1e}, update diff max {worst:.2e} rel-L2 {rel:.1e}, loss {m['loss']:.6f} vs {r['loss']:.6f}, "
          f"grad_norm {m['grad_norm']:.6f} vs {r['grad_norm']:.6f}, {time.perf_counter() - t0:.1f}s")


# --------------------------------------------------------------------------- the other objectives
OBJECTIVES = {"gspo": {"objective": "gspo", "eps_clip": 3e-4, "eps_clip_high": 4e-4},
              "cispo": {"objective": "cispo", "eps_clip": 1.0, "eps_clip_high": 0.01}}
"""Clip ranges tight enough that the second (off-policy) mini-batch clips: GSPO the paper's, CISPO an
upper clip only, as MiniMax-M1 sets it, made small so that it bites after one update."""


def _objective_worker(rank: int, world: int, port: int, cache_dir: str, objective: str, out_dir: str) -> None:
    """One rank of a data-parallel Megatron trainer on OBJECTIVES[objective]: one train step's metrics
    and the weights after it."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), TANDEM_TORCH_THREADS="1")
    import warnings

    warnings.filterwarnings("ignore")
    from tandem.trainer.megatron_backend import MegatronTrainer

    trainer = MegatronTrainer(make_cfg(cache_dir, "megatron", 1, OBJECTIVES[objective]))
    res = {"metrics": trainer.train_step(make_batch())}
    res["export"] = trainer.export_hf_state_dict()
    if rank == 0:
        torch.save(res, Path(out_dir) / "result.pt")
    trainer.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_megatron_and_torch_agree_on_gspo_and_cispo(tmp_path, cache_dir, objective):
    """Two data-parallel ranks against the torch backend, one step of two mini-batches (the second
    off-policy, where the objectives differ from PPO and clip): the loss and metrics summed over the
    ranks, the sequence clip fraction among them, and the weights after."""
    import torch.multiprocessing as mp

    ref, _ = torch_reference_step(make_cfg(cache_dir, "torch", loss=OBJECTIVES[objective]), make_batch())
    mp.spawn(_objective_worker, args=(2, _free_port(), cache_dir, objective, str(tmp_path)), nprocs=2, join=True)
    res = torch.load(tmp_path / "result.pt")
    m, r = res["metrics"], ref["metrics"]
    assert r["clip_frac"] > 0 and r["seq_clip_frac"] > 0, "the second mini-batch clips"
    for key in ("loss", "pg_loss", "kl", "entropy", "clip_frac", "seq_clip_frac", "ppo_kl"):
        assert m[key] == pytest.approx(r[key], abs=1e-5), (key, m[key], r[key])
    for k, after in ref["after"].items():
        delta_mg, delta_torch = res["export"][k] - ref["before"][k], after - ref["before"][k]
        assert ((delta_mg - delta_torch).norm() / delta_torch.norm()).item() < 1e-3, k


# --------------------------------------------------------------------------- the real launch path
@pytest.mark.timeout(240)
def run_trainer_process(cfg, tmp_path: Path, batch: list | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """torchrun with 2 ranks -> `python -m tandem.trainer` for one step on `batch` (make_batch()); (the
    process, the trainer's answer for step 0)."""
    from tandem import handoff
    from tandem.trainer.megatron_backend import trainer_launch_command

    cfg.run.steps = 1
    cfg.run.run_dir = str(tmp_path / "run")
    cfg_path = write_views(cfg, tmp_path)["trainer"]  # the trainer's view, as the launcher writes it
    handoff.write_batch(cfg.run.run_dir, handoff.TrainBatch(0, make_batch() if batch is None else batch))
    cmd = trainer_launch_command(cfg, cfg_path, nproc=2)
    assert cmd[1:3] == ["-m", "torch.distributed.run"] and "--master-addr" in cmd
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TANDEM_TORCH_THREADS": "1", "OMP_NUM_THREADS": "1",
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=220)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, handoff.wait_train_result(cfg.run.run_dir, 0, timeout_s=1)


def test_torchrun_trainer_loop_with_data_parallel(tmp_path, cache_dir, torch_reference):
    """`trainer_launch_command` -> torchrun -> `python -m tandem.trainer` on 2 ranks (DP=2, TP=1):
    one step from a real rollouts file, weights published by rank 0 through sync.publish_weights,
    and they equal the torch backend's after the same step (DP averaging + loss scaling)."""
    proc, result = run_trainer_process(make_cfg(cache_dir, "megatron", tp=1), tmp_path)
    assert result.published is not None and result.published.version == 1
    for key in ("loss", "kl", "entropy", "logprob_mismatch"):
        assert result.metrics[key] == pytest.approx(torch_reference["metrics"][key], abs=1e-5), key
    assert result.metrics["grad_norm"] == pytest.approx(torch_reference["metrics"]["grad_norm"], rel=1e-4)
    from safetensors.torch import load_file

    published = load_file(str(Path(result.published.weights_path) / "model.safetensors"))
    ref = torch_reference
    for k, after in ref["after"].items():
        delta_mg, delta_torch = published[k] - ref["before"][k], after - ref["before"][k]
        assert ((delta_mg - delta_torch).norm() / delta_torch.norm()).item() < 1e-3, k
    assert proc.stdout.count('"trainer_step": ') == 1  # only rank 0 reports
    # The last step also saved the trainer's checkpoint part: one state file per rank.
    parts = sorted(p.name for p in Path(str(result.checkpoint_tmp)).glob("trainer_rank*.pt"))
    assert parts == ["trainer_rank000.pt", "trainer_rank001.pt"]
