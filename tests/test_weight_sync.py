"""After a sync, every engine scores a fixed prompt exactly like the trainer.

Real engine subprocesses and the real router (started through the launcher's own
cluster code), the real torch trainer in this process, the real disk publish and
/update_weights_from_disk. Tolerance: 1e-4 absolute on fp32 CPU logprobs (observed
differences are ~1e-6, from different batch shapes in the two forwards).
"""

import asyncio
import json
from pathlib import Path

import httpx
import pytest
import torch

from tandem.weights import SyncError, publish_weights, published_versions, reload_engines, version_dir
from tandem.weights.publish import remove_spare, spare_dir
from tandem import losses
from tandem.orchestrator.cluster import start_engines, start_router
from tandem.config import TandemConfig
from tandem.model_source import resolve_model_path
from tandem.placement import plan_placement
from tandem.sample import Sample
from tandem.supervisor import Supervisor
from tandem.trainer.torch_backend import TorchTrainer

REPO = Path(__file__).resolve().parents[1]
TOL = 1e-4


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("sync")
    cfg = TandemConfig.model_validate({"run": {"run_dir": str(run_dir), "cache_dir": str(REPO / ".cache/tandem")},
                                       "engine": {"count": 2}, "trainer": {"lr": 0.05}})
    (run_dir / "config.json").write_text(cfg.model_dump_json())
    model_path = resolve_model_path(cfg)
    sup = Supervisor(run_dir, REPO)
    try:
        engines = start_engines(cfg, sup, plan_placement(cfg, 0), run_dir, model_path)
        router = start_router(cfg, sup, engines)
        yield cfg, run_dir, model_path, engines, router
    finally:
        sup.shutdown()


def trainer_logprobs(trainer: TorchTrainer, prompt: list[int], output: list[int]) -> list[float]:
    ids = torch.tensor([prompt + output])
    with torch.no_grad():
        logits = trainer.model(input_ids=ids).logits[:, :-1]
    lp = losses.token_logprobs(logits, ids[:, 1:], 1.0)[0, len(prompt) - 1:]
    return lp.tolist()


def engine_answer(url: str, prompt: list[int]) -> dict:
    body = {"input_ids": prompt, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 12, "temperature": 1.0, "ignore_eos": True}}
    return httpx.post(f"{url}/generate", json=body, timeout=60).json()


def test_engines_equal_trainer_after_sync(cluster):
    cfg, run_dir, model_path, engines, router = cluster
    trainer = TorchTrainer(cfg)
    prompt = [22, 28]  # "7="
    # One real training step on a batch with non-zero advantages so the weights move.
    batch = []
    for i, adv in enumerate([1.0, -1.0]):
        s = Sample(prompt_ids=prompt, group_id=0)
        s.append_model_tokens([22 + i] * 4, [0.0] * 4)
        s.advantage = adv
        batch.append(s)
    before = engine_answer(engines["engine0"], prompt)
    trainer.train_step(batch)
    path = publish_weights(trainer.export_hf_state_dict(), model_path, run_dir, 1, keep_last=3)
    report = asyncio.run(reload_engines(list(engines.values()), path, 1))
    assert report.version == 1
    for url in [*engines.values(), router]:
        out = engine_answer(url, prompt)
        assert out["meta_info"]["weight_version"] == "1"
        engine_lp = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
        diff = max(abs(a - b) for a, b in zip(engine_lp, trainer_logprobs(trainer, prompt, out["output_ids"])))
        assert diff < TOL, f"{url}: engine vs trainer logprob diff {diff}"
    # ...and the old weights really are gone from the engines.
    old_lp = [t[0] for t in before["meta_info"]["output_token_logprobs"]]
    assert max(abs(a - b) for a, b in zip(old_lp, trainer_logprobs(trainer, prompt, before["output_ids"]))) > TOL


def test_a_publish_writes_the_live_weights_uncopied_and_links_the_sidecars(cluster, tmp_path):
    """The publish path copies nothing it does not need: a CPU trainer hands its parameters to the
    writer as they are (export_hf_state_dict, the API, still returns copies), and the config and
    tokenizer files are hard links to the model's, not new copies per version."""
    import os

    cfg, _, model_path, _, _ = cluster
    trainer = TorchTrainer(cfg)
    view = trainer.export_for_sync(lora=False)
    live = {p.data_ptr() for p in trainer.model.parameters()}
    assert view and all(t.data_ptr() in live for t in view.values())
    assert not any(t.data_ptr() in live for t in trainer.export_hf_state_dict().values())
    path = publish_weights(view, model_path, tmp_path, 1, keep_last=3)
    written = load_file_all(path)
    assert written.keys() == view.keys() and all(torch.equal(written[k], view[k]) for k in written)
    for name in ("config.json", "tokenizer.json"):
        assert os.stat(path / name).st_ino == os.stat(Path(model_path) / name).st_ino


def test_a_version_sent_as_a_delta_is_served_exactly_as_a_full_publish(cluster, tmp_path):
    """fp32, so the engines can be held to 1e-4: one matrix changes in 1% of its elements (in
    bf16 a low learning rate does this by itself), the trainer side publishes a delta, this side
    applies it to a whole checkpoint and the engines reload it."""
    from transformers import AutoModelForCausalLM

    from tandem.weights.publish import drop_tied
    from tandem.weights.transport import WeightPublisher, local_copies

    cfg, _, model_path, engines, _ = cluster
    dcfg = TandemConfig.model_validate({**json.loads(cfg.model_dump_json()), "run": {
        "run_dir": str(tmp_path), "cache_dir": cfg.run.cache_dir}, "sync": {"encoding": "delta"}})
    state = TorchTrainer(dcfg).export_hf_state_dict()
    publisher = WeightPublisher(dcfg, model_path)
    assert publisher.publish(state, 1).weights_kind == "full"
    name = max(state, key=lambda k: state[k].numel())
    moved = dict(state, **{name: state[name].clone()})
    flat = moved[name].view(-1)
    flat[torch.randperm(flat.numel(), generator=torch.Generator().manual_seed(0))[: flat.numel() // 100]] += 0.5
    out = publisher.publish(moved, 2)
    assert out.weights_kind == "delta" and out.changed_fraction < 0.01
    path = local_copies(dcfg).materialize(2)
    served = load_file_all(path)
    expected = drop_tied(moved, json.loads((Path(model_path) / "config.json").read_text()))
    assert set(served) == set(expected) and all(torch.equal(served[k], expected[k]) for k in expected)
    asyncio.run(reload_engines(list(engines.values()), path, 2))
    model = AutoModelForCausalLM.from_pretrained(path, torch_dtype=torch.float32).eval()
    prompt = [22, 28]
    for url in engines.values():
        out = engine_answer(url, prompt)
        assert out["meta_info"]["weight_version"] == "2"
        engine_lp = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
        ids = torch.tensor([prompt + out["output_ids"]])
        with torch.no_grad():
            reference = losses.token_logprobs(model(input_ids=ids).logits[:, :-1], ids[:, 1:], 1.0)[0, len(prompt) - 1:]
        assert max(abs(a - b) for a, b in zip(engine_lp, reference.tolist())) < TOL, url


def load_file_all(path: Path) -> dict:
    from safetensors.torch import load_file

    return {k: v for f in sorted(path.glob("*.safetensors")) for k, v in load_file(str(f)).items()}


def test_failed_load_keeps_previous_version(cluster):
    cfg, run_dir, model_path, engines, router = cluster
    broken = run_dir / "weights" / "step_000099"
    broken.mkdir(parents=True)
    (broken / "config.json").write_text((Path(model_path) / "config.json").read_text())
    (broken / "model.safetensors").write_bytes(b"half a file")
    current = httpx.get(f"{engines['engine0']}/get_model_info", timeout=10).json().get("weight_version")
    with pytest.raises(SyncError, match="engine0|127.0.0.1"):
        asyncio.run(reload_engines(list(engines.values()), broken, 99))
    for url in engines.values():
        out = engine_answer(url, [22, 28])
        assert out["meta_info"]["weight_version"] != "99"
    assert httpx.get(f"{engines['engine0']}/get_model_info", timeout=10).json().get("weight_version") == current


PUBLISHER = """
import os, sys, torch
from tandem.weights import publish_weights, version_dir
run_dir, model_path, prunes = sys.argv[1], sys.argv[2], sys.argv[3]
print("ready", flush=True)
for v in range(1, 10_000):  # version v holds the value v; 2000 shard entries make deleting it take a while
    # 'one': every publish prunes one version (it becomes the spare); 'several': every fourth prunes
    # three, two of them retired (renamed out of the listing, then deleted) beside the spare.
    keep = 2 if prunes == "one" else (1 if v % 4 == 0 else 8)
    path = publish_weights({"model.embed_tokens.weight": torch.full((256, 256), float(v))}, model_path, run_dir, v,
                           keep_last=keep)
    for i in range(2000):  # hard links: as cheap to make as to remove, so deletes are a large share of the time
        os.link(path / "config.json", path / f"shard-{i:05d}")
"""


def check_listed_versions(run_dir: Path) -> None:
    """Every listed version is whole: its manifest (written before it is listed) names it and its
    files match their checksums, its weights are its own, and it has every shard."""
    from safetensors.torch import load_file

    from tandem.weights.store import verify_dir

    versions = published_versions(run_dir)
    for v in versions:
        d = version_dir(run_dir, v)
        manifest = json.loads((d / "manifest.json").read_text())
        assert manifest["version"] == v
        verify_dir(d, manifest)
        loaded = load_file(str(d / "model.safetensors"))
        assert torch.equal(loaded["model.embed_tokens.weight"], torch.full((256, 256), float(v))), v
        assert json.loads((d / "config.json").read_text())["model_type"] == "qwen3"
        if v != versions[-1]:  # the newest may still be getting its shards; older ones are whole
            assert len(list(d.glob("shard-*"))) == 2000, f"version {v} is listed but half deleted"


def caught_mid_delete(run_dir: Path) -> bool:
    """Is some older version's directory, listed or not, half gone? (Whatever names the code under test uses.)"""
    weights = run_dir / "weights"
    if not weights.is_dir():  # a look before the first publish made the directory (a loaded box)
        return False
    versions = published_versions(run_dir)
    newest = version_dir(run_dir, versions[-1]).name if versions else None
    return any(0 < len(list(d.glob("shard-*"))) < 2000 for d in weights.iterdir()
               if d.is_dir() and d.name != newest and not d.name.startswith(f".{newest}."))


@pytest.mark.parametrize("prunes", ["one", "several"])
def test_a_publish_stopped_or_killed_at_any_moment_never_exposes_a_partial_version(tmp_path, prunes):
    """Freeze the publisher (SIGSTOP) at 200 random moments and look as a crash would leave it: every
    listed version is complete. Then SIGKILL it: the next publish removes what it left behind. With
    'several', prunes also retire versions (not only recycle one as the spare)."""
    import random
    import signal
    import subprocess
    import sys
    import time

    cfg = TandemConfig.model_validate({"run": {"cache_dir": str(REPO / ".cache/tandem")}})
    model_path = resolve_model_path(cfg)
    rng = random.Random(0)
    proc = subprocess.Popen([sys.executable, "-c", PUBLISHER, str(tmp_path), str(model_path), prunes], cwd=REPO,
                            stdout=subprocess.PIPE, text=True)
    in_delete = 0
    try:
        assert proc.stdout.readline().strip() == "ready"
        for _ in range(200):  # the publisher moves a few ms between looks: every phase gets seen
            time.sleep(rng.uniform(0.002, 0.012))
            proc.send_signal(signal.SIGSTOP)
            try:
                in_delete += caught_mid_delete(tmp_path)
                check_listed_versions(tmp_path)
            finally:
                proc.send_signal(signal.SIGCONT)
    finally:
        proc.kill()
        proc.wait()
    assert in_delete, "no snapshot landed inside a delete: the test exercised nothing"
    check_listed_versions(tmp_path)
    last = max(published_versions(tmp_path), default=0) + 1
    publish_weights({"model.embed_tokens.weight": torch.zeros(4, 4)}, model_path, tmp_path, last, keep_last=3)
    # What is left hidden is at most this process's own spare (made when that publish pruned a version).
    left = set((tmp_path / "weights").glob(".step_*")) - {spare_dir(tmp_path / "weights")}
    assert not left, f"abandoned temporary copies were left behind: {left}"


def test_the_manifest_is_in_a_version_before_it_is_listed(tmp_path, monkeypatch):
    """The rename that lists version V (step_V appears) moves a directory that already holds V's
    manifest: a reader (an engine, a weight agent) never sees a listed version without one. Each
    listing rename is watched as it happens (os.replace wrapped)."""
    import os

    cfg = TandemConfig.model_validate({"run": {"cache_dir": str(REPO / ".cache/tandem")}})
    model_path = resolve_model_path(cfg)
    listed = []
    real = os.replace

    def replace(src, dst):
        if Path(dst).parent.name == "weights" and Path(dst).name.startswith("step_"):
            listed.append((Path(dst).name, (Path(src) / "manifest.json").exists()))
        return real(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    for v in (1, 2, 3):
        publish_weights({"model.embed_tokens.weight": torch.zeros(4, 4)}, model_path, tmp_path, v, keep_last=2)
    assert listed == [("step_000001", True), ("step_000002", True), ("step_000003", True)]


def test_publish_is_atomic_and_prunes(tmp_path):
    cfg = TandemConfig.model_validate({"run": {"cache_dir": str(REPO / ".cache/tandem")}})
    model_path = resolve_model_path(cfg)
    state = {"model.embed_tokens.weight": torch.zeros(4, 4)}
    for v in range(1, 6):
        publish_weights(state, model_path, tmp_path, v, keep_last=2)
    assert published_versions(tmp_path) == [4, 5]
    # The only hidden entry is this publisher's spare (version 3, written over by the next
    # publish); it goes when the publisher closes.
    assert [p for p in (tmp_path / "weights").iterdir() if p.name.startswith(".")] == [spare_dir(tmp_path / "weights")]
    remove_spare(tmp_path / "weights")
    assert not [p for p in (tmp_path / "weights").iterdir() if p.name.startswith(".")], "temp dirs left behind"
    assert json.loads((version_dir(tmp_path, 5) / "config.json").read_text())["model_type"] == "qwen3"


def test_continue_with_nothing_in_flight_reloads_without_a_pause():
    """partial_rollout = 'continue' pauses engines in place around a reload only when requests are
    in flight; with none (always so in sync mode) the reload is a drain with nothing to drain:
    no pause and no continue round trip, and the prefix cache is flushed as for any new weights."""
    from tandem.rollout import EngineClient
    from tandem.weights import sync_engines
    from tests._fakes import ScriptedEngine
    from tests._swe import tiny_tokenizer

    tok = tiny_tokenizer()

    async def sync(engine: ScriptedEngine, in_flight: int) -> None:
        client = EngineClient(engine.url, concurrency=4, timeout_s=10)
        client.in_flight = in_flight  # what the producer's requests would count
        async with httpx.AsyncClient() as http:
            await sync_engines(client, [engine.url], "/w/step_000001", 1, "continue", 10.0, http=http)
        assert client.weight_version == 1

    with ScriptedEngine(tok, lambda p, t: "x") as idle, ScriptedEngine(tok, lambda p, t: "x") as busy:
        asyncio.run(sync(idle, 0))
        asyncio.run(sync(busy, 2))
    assert [path for path, _ in idle.control] == ["/update_weights_from_disk"]
    assert idle.control[0][1]["flush_cache"] is True
    assert [path for path, _ in busy.control] == ["/pause_generation", "/update_weights_from_disk",
                                                  "/continue_generation"]
    assert busy.control[0][1] == {"mode": "in_place"} and busy.control[1][1]["flush_cache"] is False


def test_publishing_writes_over_a_retired_version_but_never_a_checkpointed_one(tmp_path):
    """A retired version's shard is written over in place (same inode, the pages it holds in the
    page cache reused) and reads back as the new weights; a shard a checkpoint hard-links is never
    touched, and the spare is gone once the publisher closes."""
    import os

    from safetensors.torch import load_file


    model_dir = tmp_path / "model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    root = tmp_path / "weights"

    def state(value: float, n: int = 1000) -> dict:
        return {"w": torch.full((n,), value), "b": torch.arange(3, dtype=torch.float32) + value}

    checkpointed = tmp_path / "ckpt_model.safetensors"
    p1 = publish_weights(state(1.0), model_dir, tmp_path, 1, keep_last=1, root=root)
    os.link(p1 / "model.safetensors", checkpointed)  # what checkpoint.save_trainer_part does
    publish_weights(state(2.0), model_dir, tmp_path, 2, keep_last=1, root=root)  # v1 retires to the spare
    spare = spare_dir(root)
    p3 = publish_weights(state(3.0, n=500), model_dir, tmp_path, 3, keep_last=1, root=root)
    assert torch.equal(load_file(checkpointed)["w"], torch.full((1000,), 1.0))  # the checkpoint's copy: intact
    inode_v2 = os.stat(spare / "model.safetensors").st_ino  # v2 retired to the spare: nothing links it
    p4 = publish_weights(state(4.0), model_dir, tmp_path, 4, keep_last=1, root=root)
    assert os.stat(p4 / "model.safetensors").st_ino == inode_v2  # written over in place
    assert torch.equal(load_file(p4 / "model.safetensors")["w"], torch.full((1000,), 4.0))
    assert torch.equal(load_file(p4 / "model.safetensors")["b"], torch.arange(3.0) + 4.0)
    assert not p3.exists() and published_versions(tmp_path, root) == [4]
    remove_spare(root)
    assert not spare.exists() and sorted(p.name for p in root.iterdir()) == ["step_000004"]
