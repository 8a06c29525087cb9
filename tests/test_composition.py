"""The composition root (tandem/orchestrator/run.py): the real run and the virtual-clock run are the
same `Run`, built by `compose`, around the `Edges` each kind of run injects. A part wired for the
real run and not for the virtual one fails here, unless the virtual run says why it has none."""

from __future__ import annotations

import ast
import asyncio
import dataclasses
from pathlib import Path
from types import SimpleNamespace

from tandem.config import build_config
from tandem.lab import virtual
from tandem.orchestrator import real_run, run_state
from tandem.orchestrator.run import Edges, Run
from tandem.paths import PROJECT_ROOT
from tandem.supervisor import Supervisor

PARTS = [f.name for f in dataclasses.fields(Edges)]


def present(value) -> bool:
    return value is not None and value != []


def real_edges(tmp_path: Path, monkeypatch) -> Edges:
    """The real run's edges with every optional part on (a CPU box split between phases, colocated,
    a restartable fleet), around a cluster that started nothing."""
    monkeypatch.setattr(real_run, "load_tokenizer", lambda path, trust: "tokenizer")
    cfg = build_config({"run": {"mode": "sync", "colocate": True}, "faults": {"max_engine_restarts": 1}})
    placement = SimpleNamespace(cores=8, phase_split=True, engines_on_gpu={"engine0": 0}, engine_gpus=[0])
    cluster = SimpleNamespace(router_url="http://router", engines={"engine0": "http://e0"}, start_weights=None,
                              placement=placement, trainer=None)
    sup = Supervisor(tmp_path, PROJECT_ROOT)

    async def build() -> Edges:
        edges = await real_run.real_edges(cfg, tmp_path, sup, cluster, "model", run_state.StartPoint())
        await edges.client.close()
        edges.executor.shutdown()
        return edges

    return asyncio.run(build())


def virtual_edges(tmp_path: Path) -> Edges:
    cfg = build_config({"engine": {"backend": "sim"}, "trainer": {"backend": "sim"}, "checkpoint": {"interval": 0},
                        "run": {"run_dir": str(tmp_path)}})
    engines = SimpleNamespace(urls={"engine0": "http://e0"}, http=None, gone=set())

    async def build() -> Edges:
        edges = virtual.virtual_edges(cfg, engines, "model", "tokenizer", 1.0)
        await edges.client.close()
        return edges

    return asyncio.run(build())


def test_the_virtual_run_has_every_part_of_the_real_one_or_says_why_not(tmp_path, monkeypatch):
    real = real_edges(tmp_path / "real", monkeypatch)
    sim = virtual_edges(tmp_path / "virtual")
    assert [p for p in PARTS if not present(getattr(real, p))] == []
    missing = {p for p in PARTS if not present(getattr(sim, p))}
    assert missing == set(virtual.VIRTUAL_LEAVES_OUT), \
        f"wired for the real run only: {missing - set(virtual.VIRTUAL_LEAVES_OUT)}"
    # Each part is a part of the same kind: the loop calls the same methods on both.
    for part, method in (("trainer", "result"), ("fleet", "sync"), ("cpu", "training_starts"),
                         ("client", "generate")):
        assert callable(getattr(getattr(real, part), method)) and callable(getattr(getattr(sim, part), method))
    assert len(real.watchers) == 3 and len(sim.watchers) == 1  # children, queues, doctor / queues


def test_a_builder_names_every_part():
    """No `Edges` field has a default, and every construction names each one: a part added for one
    kind of run is a decision for every other (the test above then says which one lacks it)."""
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
               for f in dataclasses.fields(Edges))
    calls = []
    for path in (PROJECT_ROOT / "tandem").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Edges":
                calls.append((path.name, sorted(k.arg for k in node.keywords)))
    assert sorted(calls) == [("real_run.py", sorted(PARTS)), ("virtual.py", sorted(PARTS))]


def test_only_the_composition_root_builds_a_run():
    builders = [path.name for path in (PROJECT_ROOT / "tandem").rglob("*.py")
                for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Run"]
    assert builders == ["run.py"]
    assert {f.name for f in dataclasses.fields(Run)} >= {"trainer", "fleet", "producer", "colocation", "autoscaler",
                                                         "view", "metrics", "evaluation", "cpu", "watchers"}
