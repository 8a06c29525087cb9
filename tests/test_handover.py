"""Colocation's hand-over, step by step, in the order the engines and the trainer receive it.

The engines' half drives the real `Colocation` and the real `Fleet` (drain, weight sync) against
engines faked at the HTTP edge (httpx.MockTransport): every request each engine receives is logged,
and the log must read, per engine: drained (asked for its load until it holds nothing), released,
weights resumed, the new version loaded, and only then the KV cache and CUDA graphs resumed
(slime's order). The trainer's half runs the trainer process's own `main` in this process on the
tiny model (a CPU torch trainer), with its backend wrapped so every call it receives is logged,
and checks each step's result for the memory it handed back and took again (on a CPU the device
is the host: the bytes are counted, not copied; tandem.trainer.offload).
"""

from __future__ import annotations

import asyncio
import functools
import json

import httpx
import torch

from tandem import handoff
from tandem.config import build_config, write_views
from tandem.orchestrator.colocation import CACHES, WEIGHTS, Colocation
from tandem.orchestrator.fleet import Fleet
from tandem.sample import Sample

ENGINES = {"engine0": "http://engine0:1", "engine1": "http://engine1:1"}
COLOCATED = {"run": {"colocate": True, "mode": "sync"}}


class Engines:
    """Two SGLang engines at the HTTP edge: each logs what it receives, in order; each still holds a
    request for its first two /get_load polls (the rollout's leftovers, aborted as their clients go)."""

    def __init__(self, log: list):
        self.log = log
        self.held = {url.split("//")[1].split(":")[0]: 2 for url in ENGINES.values()}

    def __call__(self, request: httpx.Request) -> httpx.Response:
        engine, route = request.url.host, request.url.path
        body = json.loads(request.content) if request.content else {}
        if route == "/get_load":
            held = self.held[engine]
            self.held[engine] = max(0, held - 1)
            self.log.append((engine, "load", held))
            return httpx.Response(200, json={"num_reqs": held, "num_waiting_reqs": 0})
        if route in ("/release_memory_occupation", "/resume_memory_occupation"):
            self.log.append((engine, route[1:], body["tags"]))
            return httpx.Response(200, json={})
        if route == "/update_weights_from_disk":
            self.log.append((engine, "load weights", body["weight_version"]))
            return httpx.Response(200, json={"success": True})
        return httpx.Response(404, text=f"no route {route}")


class RolloutClient:
    """The rollout client as the colocation and the weight sync see it; logs when it became idle."""

    in_flight = 0
    weight_version, adapter = 0, None

    def __init__(self, log: list):
        self.log = log

    async def wait_idle(self) -> None:
        await asyncio.sleep(0.01)  # the step's last request finishing
        self.log.append(("client", "idle", None))

    def close_gate(self) -> None: ...

    def open_gate(self) -> None: ...


class Children:
    children: dict = {}
    """No engine processes to measure: the order is what is checked here."""


def hand_over(log: list) -> None:
    async def main():
        cfg = build_config(COLOCATED)
        async with httpx.AsyncClient(transport=httpx.MockTransport(Engines(log))) as http:
            fleet = Fleet(cfg, Children(), dict(ENGINES), "http://router:1", http=http)
            client = RolloutClient(log)
            colocation = Colocation(fleet, client, timeout_s=30.0, on_gpu=False)
            await colocation.release(step=0)
            assert fleet.released
            load = functools.partial(fleet.sync, client, "/weights/v1", 1, "continue", 30.0)
            await colocation.sync(load)
            assert not fleet.released
    asyncio.run(main())


def test_engines_are_drained_then_released_and_resume_weights_load_then_caches():
    log: list = []
    hand_over(log)
    idle = log.index(("client", "idle", None))
    releases = [i for i, (_, what, _) in enumerate(log) if what == "release_memory_occupation"]
    assert len(releases) == 2 and idle < min(releases), ("an engine was released before the rollouts ended", log)
    for engine in ("engine0", "engine1"):
        seen = [(what, arg) for who, what, arg in log if who == engine]
        loads = [arg for what, arg in seen if what == "load"]
        assert loads and loads[-1] == 0, ("released without waiting for the engine to be idle", engine, seen)
        after_drain = [entry for entry in seen if entry[0] != "load"]
        assert after_drain == [("release_memory_occupation", None), ("resume_memory_occupation", WEIGHTS),
                               ("load weights", "1"), ("resume_memory_occupation", CACHES)], (engine, seen)
        assert seen.index(("release_memory_occupation", None)) > max(
            i for i, (what, _) in enumerate(seen) if what == "load"), ("released while still polled busy", seen)
    # Every engine is released before any resumes, and every engine has the new weights before any caches return.
    resumes = [i for i, (_, what, _) in enumerate(log) if what == "resume_memory_occupation"]
    assert max(releases) < min(resumes)
    weights_loaded = [i for i, (_, what, _) in enumerate(log) if what == "load weights"]
    caches = [i for i, (_, what, tags) in enumerate(log) if tags == CACHES]
    assert max(weights_loaded) < min(caches)


# --------------------------------------------------------------------------- the trainer's half
class Recorded:
    """A trainer backend whose hand-over calls are logged in the order `run_loop` makes them."""

    CALLS = ("offload", "onload", "train_step", "export_for_sync")

    def __init__(self, backend, log: list):
        self._backend, self._log = backend, log

    def __getattr__(self, name):
        attr = getattr(self._backend, name)
        if name not in self.CALLS:
            return attr

        def call(*args, **kwargs):
            out = attr(*args, **kwargs)
            self._log.append((name, round(out.get(f"trainer_{name}ed_mb", 0.0) * 2**20)
                              if name in ("offload", "onload") else None))
            return out
        return call


def _batch(seed: int) -> list[Sample]:
    g = torch.Generator().manual_seed(seed)
    return [Sample(prompt_ids=torch.randint(0, 256, (3,), generator=g).tolist(),
                   response_ids=torch.randint(0, 256, (4,), generator=g).tolist(), loss_mask=[1] * 4,
                   rollout_logprobs=[0.0] * 4, advantage=float(i - 2), group_id=0) for i in range(5)]


def test_a_colocated_trainer_hands_its_memory_back_every_step_and_takes_it_again(tmp_path, monkeypatch):
    from tandem.trainer import __main__ as trainer_main

    monkeypatch.setenv("TANDEM_TORCH_THREADS", "1")
    steps = 3
    cfg = build_config({**COLOCATED, "run": {**COLOCATED["run"], "run_dir": str(tmp_path / "run"), "steps": steps,
                                             "cache_dir": str(tmp_path / "cache")},
                        "trainer": {"device": "cpu"}, "checkpoint": {"interval": 0}})
    run = tmp_path / "run"
    views = write_views(cfg, run)
    log: list = []
    built = []

    def make_backend(cfg):
        built.append(real_make_backend(cfg))
        return Recorded(built[-1], log)

    real_make_backend = trainer_main.make_backend
    monkeypatch.setattr(trainer_main, "make_backend", make_backend)
    for step in range(steps):
        handoff.write_batch(run, handoff.TrainBatch(step, _batch(step)))
    assert trainer_main.main(["--run-config", str(views["trainer"])]) == 0

    model = built[0].model
    weights = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers()))
    with_adam = weights + 2 * sum(p.numel() * p.element_size() for p in model.parameters())  # AdamW's two moments
    # Before the first batch the device is the engines' (weights only: no optimizer state yet); then, each
    # step: its state back, trained, the new weights exported for the engines, and everything handed back.
    assert log == [("offload", weights),
                   ("onload", weights), ("train_step", None), ("export_for_sync", None), ("offload", with_adam),
                   ("onload", with_adam), ("train_step", None), ("export_for_sync", None), ("offload", with_adam),
                   ("onload", with_adam), ("train_step", None), ("export_for_sync", None), ("offload", with_adam)], log
    for step in range(steps):  # the orchestrator hears of a step only once its memory is handed back
        result = handoff.wait_train_result(run, step, timeout_s=1)
        assert result.handover["trainer_offloaded_mb"] * 2**20 == with_adam, result
        assert result.handover["trainer_onloaded_mb"] * 2**20 == (weights if step == 0 else with_adam), result
        assert result.published is not None and result.published.version == step + 1
