"""Colocation (run.colocate): the rules of the config, the SGLang command, the placement on one GPU,
the trainer's offload, and the run itself, where the engines' resident memory is read from their
processes (/proc/PID/status) while the trainer trains and again once they generate.

The release/resume endpoints themselves are in the engine conformance suite (tests/engine_conformance.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tandem.config import ConfigError, build_config, load_config
from tandem.engine import sglang_launch as sl
from tandem.orchestrator.colocation import process_tree, resident_bytes
from tandem.placement import plan_placement
from tandem.trainer.offload import HostOffload

REPO = Path(__file__).resolve().parents[1]


# --------------------------------------------------------------------------- config and command
@pytest.mark.parametrize("args, cause", [
    (["--run.colocate", "true"], "run.mode = 'async'"),
    (["--run.colocate", "true", "--mode", "sync", "--engine.backend", "external", "--engine.external.urls",
      '["http://h:1"]'], "engine.backend = 'external'"),
])
def test_colocation_refused_where_it_cannot_work(args, cause):
    with pytest.raises(ConfigError) as err:
        load_config(args)
    assert cause in str(err.value) and "run.colocate" in str(err.value)
    assert load_config(["--run.colocate", "true", "--mode", "sync"]).colocated


def sglang_cfg(**run):
    return build_config({"engine": {"backend": "sglang", "count": 1}, "trainer": {"device": "cuda"},
                         "model": {"dtype": "bfloat16"}, "run": {"mode": "sync", **run}})


def test_sglang_gets_the_memory_saver_only_when_colocated():
    _, flags = sl.load_server_args()
    assert flags["--enable-memory-saver"] == "flag"  # SGLang 0.5.23's own argument list
    colocated = sl.sglang_command(sglang_cfg(colocate=True), 30000, "/m")
    assert colocated.count("--enable-memory-saver") == 1
    for off in (False, "auto"):  # auto resolves before the engines start: a config still on auto is not colocated
        assert "--enable-memory-saver" not in sl.sglang_command(sglang_cfg(colocate=off), 30000, "/m")
    with pytest.raises(ConfigError, match="run.colocate"):  # tandem owns the flag
        sl.extra_args({"enable_memory_saver": True})


def test_one_gpu_holds_the_trainer_and_the_engines():
    cfg = load_config(["--run.colocate", "true", "--mode", "sync", "--engines", "2"])
    p = plan_placement(cfg, visible_gpus=1)
    assert p.trainer_gpus == ["0"] and p.engine_gpus == ["0", "0"] and p.engines_on_gpu
    # Not colocated, the same box keeps the old fallback: the trainer on the GPU, the engines on the CPU.
    apart = plan_placement(load_config(["--run.colocate", "false", "--engines", "2"]), visible_gpus=1)
    assert apart.trainer_gpus == ["0"] and apart.engine_gpus == [None, None]
    with pytest.raises(ConfigError, match="one SGLang engine per trainer GPU"):
        plan_placement(build_config({"engine": {"backend": "sglang", "count": 2}, "run": {"mode": "sync",
                                                                                           "colocate": True}}), 1)


# --------------------------------------------------------------------------- the trainer's offload
def _trainer(cache_dir: str):
    from tandem.trainer.torch_backend import TorchTrainer

    return TorchTrainer(build_config({"run": {"cache_dir": cache_dir, "seed": 0}, "trainer": {"device": "cpu"}}))


def _batch():
    from tandem.sample import Sample

    g = torch.Generator().manual_seed(3)
    return [Sample(prompt_ids=torch.randint(0, 256, (3,), generator=g).tolist(),
                   response_ids=torch.randint(0, 256, (4,), generator=g).tolist(), loss_mask=[1] * 4,
                   rollout_logprobs=[0.0] * 4, advantage=float(i - 2), group_id=0) for i in range(5)]


def test_offload_moves_weights_and_optimizer_state_and_training_is_bitwise_the_same(tmp_path, monkeypatch):
    """On a CPU the device is the host, so the offload copies (copy=True) to run every move: the state
    must leave its storage, come back, and three steps with an offload between each must give the very
    weights and metrics of three steps without."""
    monkeypatch.setenv("TANDEM_TORCH_THREADS", "1")
    plain, moved = _trainer(str(tmp_path)), _trainer(str(tmp_path))
    assert not moved.host_offload.active  # a CPU trainer moves nothing in a real run
    moved.host_offload = HostOffload(moved.device, [moved.model], [moved.optimizer], copy=True)
    params = sum(p.numel() for p in moved.model.parameters())
    for step in range(3):
        a, b = plain.train_step(_batch()), moved.train_step(_batch())
        assert {k: v for k, v in a.items() if k != "train_time"} == {k: v for k, v in b.items() if k != "train_time"}
        ptrs = {id(p): p.data_ptr() for p in moved.model.parameters()}
        state_ptrs = [t.data_ptr() for s in moved.optimizer.state.values() for t in s.values() if t.numel() > 1]
        report = moved.offload()
        # Weights (fp32) and AdamW's two moments: 12 B per parameter, plus the rotary buffers.
        buffers = sum(b.numel() * b.element_size() for b in moved.model.buffers())
        assert report["trainer_offloaded_mb"] * 2**20 == params * 12 + buffers
        assert all(p.data_ptr() != ptrs[id(p)] for p in moved.model.parameters())
        assert all(t.data_ptr() not in state_ptrs for s in moved.optimizer.state.values() for t in s.values()
                   if t.numel() > 1)
        assert moved.offload() == {}  # twice is once
        assert "trainer_onload_time" in moved.onload()
    for (name, p), q in zip(plain.model.named_parameters(), moved.model.parameters()):
        assert torch.equal(p, q), name


# --------------------------------------------------------------------------- the run
def engine_pids() -> list[int]:
    """This process's engine children (`python -m tandem.engine`), found from /proc, not from tandem."""
    pids = []
    for pid in process_tree(os.getpid())[1:]:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"tandem.engine" in cmd:
            pids.append(pid)
    return pids


class MemoryProbe:
    """At the loop's hand-over points, the engines' VmRSS as the kernel reports it."""

    def __init__(self):
        from tandem.orchestrator.hooks import RunHooks

        probe = self

        class Hooks(RunHooks):
            async def at_async(self, phase: str, n: int) -> None:
                if phase in ("released", "sync"):
                    pids = engine_pids()
                    probe.samples.append((phase, n, len(pids), sum(resident_bytes(p) for p in pids)))

        self.samples: list[tuple[str, int, int, int]] = []
        self.hooks = Hooks()


BIG = ["--model.tiny.hidden_size", "512", "--model.tiny.intermediate_size", "2048", "--model.tiny.num_layers", "4",
       "--model.tiny.num_heads", "8", "--model.tiny.num_kv_heads", "4", "--model.tiny.head_dim", "64"]
"""A tiny model big enough to see: 15.7 M parameters, 63 MB in fp32 per engine."""


@pytest.mark.e2e
def test_engines_hand_their_memory_to_the_train_step_and_take_it_back(tmp_path):
    from tandem.orchestrator import launcher

    probe = MemoryProbe()
    run = tmp_path / "run"
    code = launcher.main(["--run.colocate", "true", "--mode", "sync", "--steps", "3", "--engines", "2",
                          "--rollout.prompts_per_step", "2", "--rollout.samples_per_prompt", "4",
                          "--run-dir", str(run), "--run.cache_dir", str(tmp_path / "cache"), "--logging.live", "off",
                          "--logging.tensorboard", "false", *BIG], hooks=probe.hooks)
    assert code == 0
    weights = sum(f.stat().st_size for f in (tmp_path / "cache").rglob("*.safetensors"))
    assert weights > 60e6  # the model both engines load
    phases = [(phase, n, count) for phase, n, count, _ in probe.samples]
    # Step k's train step (engines released), then version k loaded (weights back) before step k+1 generates.
    assert phases == [("released", 1, 2), ("sync", 1, 2), ("released", 2, 2), ("sync", 2, 2), ("released", 3, 2),
                      ("sync", 3, 2)], phases
    rss = [r for *_, r in probe.samples]
    each = weights * 0.8  # each engine gives back (nearly) its whole copy of the weights
    for k in range(0, 6, 2):
        assert rss[k + 1] - rss[k] >= 2 * each, ("the weights did not come back for generation", k, rss)
        if k:
            assert rss[k - 1] - rss[k] >= 2 * each, ("the engines kept their memory through the train step", k, rss)
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    for row in rows:  # the loop's own measurement agrees with the kernel's
        assert row["engine_memory_released_mb"] * 2**20 >= 2 * each
        assert row["engine_memory_restored_mb"] * 2**20 >= 2 * each
        assert row["handover_time"] >= row["handover_release_time"] > 0
        # and the trainer handed its state back after each step and took it again before it (a CPU counts the bytes)
        assert row["trainer_offloaded_mb"] > 0 and row["trainer_onloaded_mb"] > 0, row
    print(f"FIGURE colocation: engines' VmRSS (MiB) at released/loaded: {[round(r / 2**20) for r in rss]}")


# --------------------------------------------------------------------------- run.colocate = "auto"
def test_a_one_gpu_box_runs_the_default_job_colocated_and_says_so(monkeypatch, capsys):
    """`python train.py` with no flags (run.colocate = "auto"), through the launcher's GPU-count seam: one
    80 GB GPU gets colocated sync mode, and start-up says so with the plan's peaks; no GPU or two GPUs keep
    the run as configured; a model that does not fit stays apart, saying why."""
    from tandem.orchestrator import launcher

    def on_box(gpus: int, *args: str):
        monkeypatch.setattr(launcher, "visible_gpu_count", lambda: gpus)
        monkeypatch.setattr(launcher, "visible_gpu_memory_bytes", lambda: 80 * 2**30)
        return launcher.choose_colocation(load_config(list(args)))

    cfg = on_box(1)
    said = capsys.readouterr().out
    assert cfg.colocated and cfg.run.mode == "sync" and cfg.effective_staleness == 0
    assert "one GPU of 80 GiB" in said and "colocated in sync mode" in said and "of 78.7 GiB" in said
    assert plan_placement(cfg, 1).engine_gpus == ["0", "0"]
    for gpus in (0, 2):
        cfg = on_box(gpus)
        assert cfg.run.colocate is False and cfg.run.mode == "async" and capsys.readouterr().out == ""
    assert on_box(1, "--run.colocate", "false").run.mode == "async"  # said no: never colocated
    cfg = on_box(1, "--model", "Qwen/Qwen3-8B")  # fp32 at 40,960 tokens with the torch trainer: far too big
    assert cfg.run.colocate is False and cfg.run.mode == "async"
    assert "does not fit" in capsys.readouterr().out
