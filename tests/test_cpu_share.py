"""Sharing the CPU (run.cpu_split = "phase"): the split rule and the demand bookkeeping with
hand-derived numbers, the placement it starts from, and the trainer's channel (its batch file).
The engines' channel, POST /set_cpu_threads, is in tests/engine_conformance.py."""

from __future__ import annotations

import asyncio

import pytest
import torch

from tandem import handoff
from tandem.config import load_config
from tandem.orchestrator.cpu_share import PROBE_EVERY, CpuShare, Split, ThreadChoice, split_by_demand
from tandem.placement import plan_placement
from tandem.weights.record import Published


@pytest.mark.parametrize("cores,engines,engine_demand,trainer_demand,expected", [
    (2, 1, 9.0, 1.0, Split(1, 1)),      # 2 cores: one each, whatever the demand
    (8, 1, 3.0, 1.0, Split(6, 2)),      # round(8 * 3/4) = 6 for the engine
    (8, 2, 3.0, 1.0, Split(3, 2)),      # 6 for the engines, 3 each
    (16, 3, 1.0, 1.0, Split(2, 10)),    # round(16 / 2) = 8 for engines -> 2 each (floor), the rest trains
    (8, 1, None, 1.0, Split(4, 4)),     # nothing measured yet: an even share per process
    (8, 1, 100.0, 0.001, Split(7, 1)),  # the trainer always keeps a thread
    (8, 2, 0.001, 100.0, Split(1, 6)),  # each engine always keeps one
    (2, 2, 1.0, 1.0, Split(1, 1)),      # more processes than cores: one thread each
])
def test_split_by_demand(cores, engines, engine_demand, trainer_demand, expected):
    assert split_by_demand(cores, engines, engine_demand, trainer_demand) == expected


def engine_setter() -> tuple[list[int], object]:
    """What the engines were told (in order), and the setter that records it."""
    sent: list[int] = []

    async def set_engines(threads: int) -> None:
        sent.append(threads)
    return sent, set_engines


def test_async_share_splits_by_measured_demand():
    sent, set_engines = engine_setter()

    async def scenario() -> None:
        share = CpuShare(8, 1, overlapping=True, set_engine_threads=set_engines)
        assert share.engine_threads == 8                      # placement: the engine alone on the machine
        assert await share.training_starts() == 4             # nothing measured: 4 and 4
        share.training_done(train_s=2.0, rollout_s=3.0)       # trainer 2 s x 4 = 8, engine 3 s x 4 = 12
        assert (share.trainer_demand, share.engine_demand) == (8.0, 12.0)
        assert await share.training_starts() == 3             # round(8 * 12/20) = 5 for the engine
        share.training_done(train_s=4.0, rollout_s=1.0)       # 4 x 3 = 12, 1 x 5 = 5: smoothed 10, 8.5
        assert (share.trainer_demand, share.engine_demand) == (10.0, 8.5)
        assert await share.training_starts() == 4             # round(8 * 8.5/18.5) = round(3.68) = 4
        assert await share.training_starts() == 4             # unchanged: no call to the engines

    asyncio.run(scenario())
    assert sent == [4, 5, 4]


def test_sync_share_gives_the_trainer_the_thread_count_that_measured_faster():
    sent, set_engines = engine_setter()
    # (seconds this step takes with 8 threads, with the even share of 8 // 3 ... = 4): a machine that
    # gets busy at step 6, where every core is slower than the share (the OS parks a thread)
    times = {8: [9.0, 1.0, 1.0, 1.0, 1.0, 1.0, 6.0, 6.0, 6.0], 4: [2.0] * 9}
    picked = []

    async def scenario() -> None:
        share = CpuShare(8, 2, overlapping=False, set_engine_threads=set_engines)
        for step in range(len(times[8])):
            threads = await share.training_starts()
            picked.append(threads)
            share.training_done(train_s=times[threads][step], rollout_s=5.0)

    asyncio.run(scenario())
    # step 0 (9 s: warm-up) is not counted; 8 measured 1 s, 4 measured 2 s: 8 kept; the busy
    # machine makes 8 cost 6 s (smoothed with 1 s: 3.5 > 2): back to 4 at the next step
    assert picked == [8, 8, 4, 8, 8, 8, 8, 4, 4]
    assert sent == []  # engines keep 8 // 2 = 4 each from placement: the phases never overlap


def test_the_trainers_other_thread_count_is_retried_every_probe_interval():
    choice = ThreadChoice([2, 1])
    seen = []
    for _ in range(2 * PROBE_EVERY + 3):
        threads = choice.pick()
        seen.append(threads)
        choice.record(threads, {2: 1.0, 1: 3.0}[threads])
    assert seen[:3] == [2, 2, 1]
    assert [i for i, t in enumerate(seen) if t == 1] == [2, PROBE_EVERY, 2 * PROBE_EVERY]


def test_placement_gives_the_computing_side_the_machine(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    phase = plan_placement(load_config(["--engine.count", "2"]), visible_gpus=0)
    assert phase.phase_split and phase.cpu_threads == 4 and phase.trainer_cpu_threads == 8
    assert phase.engine_env(0)["TANDEM_TORCH_THREADS"] == "4" and phase.trainer_env()["OMP_NUM_THREADS"] == "8"
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # threads that wait sleep: no spinning on a busy machine
    assert phase.trainer_env()["OMP_WAIT_POLICY"] == phase.engine_env(0)["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")  # the user's choice is kept
    assert phase.trainer_env()["OMP_WAIT_POLICY"] == "ACTIVE"
    even = plan_placement(load_config(["--engine.count", "2", "--run.cpu_split", "even"]), visible_gpus=0)
    assert not even.phase_split and even.cpu_threads == even.trainer_cpu_threads == 8 // 3
    sim = plan_placement(load_config(["--engine.count", "2", "--engine.backend", "sim"]), visible_gpus=0)
    assert not sim.phase_split  # a sim engine's cost is modelled, not computed
    gpu = plan_placement(load_config(["--engine.count", "2", "--engine.embedded.device", "cuda"]), visible_gpus=4)
    assert not gpu.phase_split and gpu.engine_gpus == ["1", "2"]


def test_the_trainer_takes_its_threads_from_the_batch(tmp_path):
    from tandem.trainer.__main__ import run_loop

    class Backend:
        is_main_process = True

        def __init__(self):
            self.threads_seen: list[int] = []

        def train_step(self, samples):
            self.threads_seen.append(torch.get_num_threads())
            return {"train_time": 0.0}

        def export_for_sync(self, lora):
            return {}

    class Publisher:
        def publish(self, state_dict, version, force_full=False):
            return Published(version, str(tmp_path / "weights" / f"step_{version:06d}"))

    cfg = load_config(["--run.steps", "3", "--checkpoint.interval", "0"])
    before = torch.get_num_threads()
    try:
        handoff.write_batch(tmp_path, handoff.TrainBatch(0, [], cpu_threads=1))
        handoff.write_batch(tmp_path, handoff.TrainBatch(1, [], cpu_threads=2))
        handoff.write_batch(tmp_path, handoff.TrainBatch(2, []))  # no share sent (run.cpu_split = "even"): the count stays
        backend = Backend()
        run_loop(cfg, backend, str(tmp_path), Publisher(), log=lambda line: None)
        assert backend.threads_seen == [1, 2, 2]
    finally:
        torch.set_num_threads(before)
