"""GPU placement: trainer on GPUs 0..trainer.gpus-1, one GPU per engine after them, CPU without GPUs."""

from __future__ import annotations

import pytest

from tandem.config import ConfigError, build_config, load_config
from tandem.placement import plan_placement, visible_gpu_count
from tandem.trainer.megatron_backend import trainer_launch_command


def gpu_cfg(engines: int, trainer_gpus: int = 4, **megatron):
    return build_config({"engine": {"backend": "sglang", "count": engines},
                         "trainer": {"backend": "megatron", "gpus": trainer_gpus,
                                     "megatron": {"tensor_parallel": 1, **megatron}}})


@pytest.fixture(autouse=True)
def _all_gpus_visible(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.parametrize("engines,expected", [(1, ["4"]), (2, ["4", "5"]), (3, ["4", "5", "6"])])
def test_eight_gpu_node(engines, expected):
    p = plan_placement(gpu_cfg(engines), visible_gpus=8)
    assert p.trainer_gpus == ["0", "1", "2", "3"] and p.engine_gpus == expected
    assert p.trainer_env()["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert [p.engine_env(i) for i in range(engines)] == [{"CUDA_VISIBLE_DEVICES": g} for g in expected]
    assert p.engine_device(0) == "cuda:4" and p.trainer_devices() == [f"cuda:{i}" for i in range(4)]
    # torchrun starts one rank per trainer GPU
    cmd = trainer_launch_command(gpu_cfg(engines), "/r/config.json")
    assert cmd[cmd.index("--nproc-per-node") + 1] == "4" and cmd[cmd.index("--master-addr") + 1] == "127.0.0.1"


def test_two_gpu_box_one_trainer_gpu_one_engine():
    p = plan_placement(gpu_cfg(1, trainer_gpus=1), visible_gpus=2)
    assert p.trainer_gpus == ["0"] and p.engine_gpus == ["1"]


def test_too_few_gpus_names_what_was_asked_and_what_exists():
    with pytest.raises(ConfigError) as err:
        plan_placement(gpu_cfg(3), visible_gpus=4)
    msg = str(err.value)
    assert "engine.count=3" in msg and "trainer.gpus=4" in msg and "need 7 GPU(s)" in msg and "4 are visible" in msg
    with pytest.raises(ConfigError, match="need 1 GPU"):
        plan_placement(gpu_cfg(1), visible_gpus=0)  # megatron + sglang on a CPU box: the SGLang engine


def test_without_gpus_trainer_gpus_means_cpu_ranks(monkeypatch):
    """The node's TOML runs unchanged on a CPU: Megatron on trainer.gpus gloo ranks, cores shared out."""
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    cfg = load_config(["--trainer.backend", "megatron", "--trainer.gpus", "4", "--trainer.megatron.tensor_parallel", "2",
                       "--engine.count", "2"])
    p = plan_placement(cfg, visible_gpus=0)
    assert p.trainer_gpus == [] and p.trainer_devices() == ["cpu"] and p.engine_gpus == [None, None]
    assert p.cpu_threads == 16 // (2 + 4) and trainer_launch_command(cfg, "c.json")[8] == "4"
    with pytest.raises(ConfigError, match="need 4 GPU"):  # asked for CUDA explicitly: no silent CPU
        plan_placement(load_config(["--trainer.backend", "megatron", "--trainer.gpus", "4", "--trainer.device", "cuda",
                                    "--trainer.megatron.tensor_parallel", "2"]), visible_gpus=0)
    on_a_node = plan_placement(cfg, visible_gpus=8)  # 'auto' with GPUs: the GPUs, as before
    assert on_a_node.trainer_gpus == ["0", "1", "2", "3"]


def test_cuda_visible_devices_are_respected(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,4,5,6,7")
    assert visible_gpu_count() == 5
    p = plan_placement(gpu_cfg(2, trainer_gpus=2), visible_gpus=visible_gpu_count())
    assert p.trainer_gpus == ["3", "4"] and p.engine_gpus == ["5", "6"]


def test_no_gpus_puts_everything_on_cpu():
    cfg = build_config({"engine": {"count": 2}})  # the CPU defaults: embedded engines, torch trainer
    p = plan_placement(cfg, visible_gpus=0)
    assert p.trainer_gpus == [] and p.engine_gpus == [None, None]
    assert p.engine_device(1) == "cpu" and p.trainer_devices() == ["cpu"]
    env = p.engine_env(0)
    assert env["CUDA_VISIBLE_DEVICES"] == "" and int(env["OMP_NUM_THREADS"]) >= 1


def test_trainer_gpus_must_fit_the_parallel_layout():
    # Caught when the config is validated, before any process starts.
    with pytest.raises(ValueError, match=r"trainer.gpus \(2\) must be a multiple of trainer.megatron.tensor_parallel"):
        trainer_launch_command(gpu_cfg(1, trainer_gpus=2, tensor_parallel=4), "/r/config.json")


def test_free_ports_are_never_handed_out_twice(monkeypatch):
    """The kernel may offer one port twice before anyone binds it (the router's port and its
    Prometheus port once came out equal): free_port asks again instead."""
    import socket

    from tandem import ports

    offered = iter([41001, 41001, 41002])

    class Fake:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def bind(self, addr):
            self.port = next(offered)

        def getsockname(self):
            return ("127.0.0.1", self.port)

    monkeypatch.setattr(socket, "socket", lambda *a: Fake())
    monkeypatch.setattr(ports, "_handed_out", set())
    assert [ports.free_port(), ports.free_port()] == [41001, 41002]
