"""Delta weight versions: the codec on hand-derived numbers, anchors, and rebuilding whole
checkpoints from a store holding deltas (a local directory store; the S3 path is the same
store code, tested in test_weight_store.py). Every rebuilt version is compared bit for bit with
a full publish of the same weights. Faults: a missing delta, a corrupted delta, a crash while a
delta is applied, a resume in the middle of a chain."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import zstandard
from safetensors.torch import load, load_file

from tandem.config import TandemConfig
from tandem.weights import ChecksumError, WeightStore, publish_weights
from tandem.weights.delta import DELTA_FILE, DeltaEncoder, DeltaError, apply_delta
from tandem.weights.materialize import LocalVersions
from tandem.weights.transport import WeightPublisher

BF16 = torch.bfloat16


def bf16(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=BF16)


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.reshape(-1).view(torch.int16)


def model(w1: float = 2.0, b: float = 0.5, w0: float = 1.0) -> dict[str, torch.Tensor]:
    """1000 bf16 weights (2000 bytes: big enough for a one-element delta to pay) and a bias."""
    w = torch.ones(1000, dtype=BF16)
    w[0], w[1] = w0, w1
    return {"w": w, "b": bf16(b)}


def test_one_changed_element_is_one_index_and_one_value():
    enc = DeltaEncoder(anchor_interval=10)
    first = enc.encode(model(), 1)
    assert first.kind == "full" and first.reason == "first version"
    d = enc.encode(model(w1=5.0), 2)
    assert (d.kind, d.base_version, d.changed_elements, d.total_elements) == ("delta", 1, 1, 1001)
    assert d.changed_fraction == pytest.approx(1 / 1001)
    parts = load(zstandard.ZstdDecompressor().decompress(d.payload))
    assert set(parts) == {"w::gap", "w::value"}  # b unchanged: omitted
    assert parts["w::gap"].tolist() == [1] and parts["w::value"].tolist() == [5.0]
    base = model()
    manifest = {"version": 2, "base_version": 1, **d.manifest_fields()}
    assert apply_delta(base, d.payload, manifest) == {"w"}
    assert base["w"][:3].tolist() == [1, 5, 1] and torch.equal(bits(base["w"]), bits(model(w1=5.0)["w"]))
    assert apply_delta(base, d.payload, manifest) == {"w"} and base["w"][1].item() == 5  # idempotent


def test_positions_travel_as_gaps():
    enc = DeltaEncoder(anchor_interval=10)
    enc.encode(model(), 1)
    after = model(w1=5.0)
    after["w"][[7, 8, 500]] = 3.0
    parts = load(zstandard.ZstdDecompressor().decompress(enc.encode(after, 2).payload))
    assert parts["w::gap"].tolist() == [1, 6, 1, 492] and parts["w::value"].tolist() == [5, 3, 3, 3]


def test_bits_not_values_decide_what_changed():
    enc = DeltaEncoder(anchor_interval=10)
    enc.encode(model(w0=0.0), 1)
    d = enc.encode(model(w0=-0.0), 2)  # -0.0 == 0.0, but the bytes differ
    assert d.kind == "delta" and d.changed_elements == 1


def test_anchors_come_on_schedule_and_when_a_delta_would_not_pay():
    enc = DeltaEncoder(anchor_interval=3)
    w = torch.zeros(4096, dtype=BF16)
    kinds = []
    for v in range(1, 8):
        w = w.clone()
        w[v] = v
        kinds.append(enc.encode({"w": w}, v).kind)
    assert kinds == ["full", "delta", "delta", "full", "delta", "delta", "full"]
    assert enc.encode({"w": torch.randn(4096)}, 8).reason == "the tensor set changed"  # now fp32
    noise = torch.randint(-2**31, 2**31 - 1, (4096,), dtype=torch.int32).view(torch.float32)
    every = enc.encode({"w": noise}, 9)  # every element moved to incompressible bits: values alone fill a full copy
    assert every.kind == "full" and "not smaller than the full copy" in every.reason
    assert enc.encode({"w": torch.zeros(4096)}, 11).reason == "not the successor of version 9"
    assert enc.encode({"w": torch.zeros(4096)}, 12, force_full=True).kind == "full"


def test_a_delta_applied_to_the_wrong_base_is_refused_naming_the_tensor():
    enc = DeltaEncoder(anchor_interval=10)
    enc.encode(model(), 1)
    d = enc.encode(model(w1=7.0), 2)
    wrong_base = model(b=4.0)
    with pytest.raises(DeltaError, match="tensor b does not match its checksum after applying the delta to version 1"):
        apply_delta(wrong_base, d.payload, {"version": 2, "base_version": 1, **d.manifest_fields()})


# --------------------------------------------------------------------------- whole checkpoints from a store
@pytest.fixture
def source(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"tie_word_embeddings": False, "model_type": "qwen3"}))
    (src / "tokenizer.json").write_text("{}")
    return src


def states(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """n versions of a small bf16 model; each changes ~1% of one tensor's elements, as a step at
    a low learning rate does."""
    g = torch.Generator().manual_seed(seed)
    state = {"model.a": torch.randn(64, 64, generator=g).to(BF16), "model.b": torch.randn(256, generator=g).to(BF16)}
    out = [state]
    for _ in range(n - 1):
        state = {k: v.clone() for k, v in state.items()}
        idx = torch.randint(0, 4096, (40,), generator=g)
        state["model.a"].view(-1)[idx] += 0.5
        out.append(state)
    return out


def publisher(tmp_path: Path, source: Path, anchor_interval: int = 20, keep_last: int = 3) -> WeightPublisher:
    cfg = TandemConfig.model_validate({"run": {"run_dir": str(tmp_path / "run")}, "model": {"dtype": "bfloat16"},
                                       "sync": {"encoding": "delta", "anchor_interval": anchor_interval,
                                                "keep_last": keep_last}})
    return WeightPublisher(cfg, str(source))


def assert_same_as_full_publish(rebuilt: Path, state: dict, source: Path, tmp_path: Path) -> None:
    reference = publish_weights(state, source, tmp_path / "reference", 1, keep_last=1)
    got, want = load_file(str(rebuilt / "model.safetensors")), load_file(str(reference / "model.safetensors"))
    assert set(got) == set(want) and all(torch.equal(bits(got[k]), bits(want[k])) for k in want)
    assert (rebuilt / "config.json").read_text() == (reference / "config.json").read_text()
    shutil.rmtree(tmp_path / "reference")


def test_every_version_rebuilt_from_deltas_equals_a_full_publish(tmp_path, source):
    pub = publisher(tmp_path, source)
    weights = tmp_path / "run" / "weights"
    host = LocalVersions(WeightStore(str(weights)), tmp_path / "host")
    for v, state in enumerate(states(5), start=1):
        out = pub.publish(state, v)
        assert out.weights_kind == ("full" if v == 1 else "delta")
        if v > 1:
            assert out.changed_fraction < 0.02 and out.publish_bytes < 0.1 * 2 * (4096 + 256)
            assert (weights / f"step_{v:06d}" / DELTA_FILE).exists()
        assert_same_as_full_publish(host.materialize(v), state, source, tmp_path)


def test_a_host_that_missed_versions_rebuilds_from_the_newest_anchor(tmp_path, source):
    pub = publisher(tmp_path, source, anchor_interval=4, keep_last=2)
    weights = tmp_path / "run" / "weights"
    host = LocalVersions(WeightStore(str(weights)), tmp_path / "host")
    seq = states(7)
    for v, state in enumerate(seq, start=1):
        pub.publish(state, v)
        if v == 2:
            host.materialize(2)  # then the host is away for versions 3..6
    assert WeightStore(str(weights)).versions() == [5, 6, 7]  # anchor 5 and the deltas on it
    assert_same_as_full_publish(host.materialize(7), seq[6], source, tmp_path)
    assert not (tmp_path / "host" / "step_000002").exists()  # pruned: only the last two stay


def test_a_missing_delta_stops_with_an_error_naming_it(tmp_path, source):
    pub = publisher(tmp_path, source)
    weights = tmp_path / "run" / "weights"
    for v, state in enumerate(states(4), start=1):
        pub.publish(state, v)
    shutil.rmtree(weights / "step_000003")
    with pytest.raises(DeltaError, match="delta 4 builds on version 3, which the store no longer holds"):
        LocalVersions(WeightStore(str(weights)), tmp_path / "host").materialize(4)


def test_a_corrupted_delta_fails_its_checksum_and_the_previous_version_stays(tmp_path, source):
    pub = publisher(tmp_path, source)
    weights = tmp_path / "run" / "weights"
    host = LocalVersions(WeightStore(str(weights)), tmp_path / "host")
    seq = states(3)
    for v, state in enumerate(seq[:2], start=1):
        pub.publish(state, v)
    host.materialize(2)
    pub.publish(seq[2], 3)
    delta = weights / "step_000003" / DELTA_FILE
    data = bytearray(delta.read_bytes())
    data[len(data) // 2] ^= 0xFF
    delta.write_bytes(bytes(data))
    with pytest.raises(ChecksumError, match=f"weight version 3: {DELTA_FILE} failed its checksum"):
        host.materialize(3)
    assert not list((tmp_path / "host").glob("step_000003*"))  # nothing half-built
    assert_same_as_full_publish(tmp_path / "host" / "step_000002", seq[1], source, tmp_path)


def test_a_crash_while_a_delta_is_applied_leaves_the_previous_version_whole(tmp_path, source, monkeypatch):
    import tandem.weights.safetensors_io as safetensors_io

    pub = publisher(tmp_path, source)
    host = LocalVersions(WeightStore(str(tmp_path / "run" / "weights")), tmp_path / "host")
    seq = states(3)
    for v, state in enumerate(seq[:2], start=1):
        pub.publish(state, v)
    host.materialize(2)
    pub.publish(seq[2], 3)

    def dies_halfway(path, tensors, metadata=None):
        Path(path).write_bytes(b"\0" * 100)  # the disk filled, or the process was killed mid-write
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors_io, "write_safetensors", dies_halfway)
    with pytest.raises(OSError, match="No space left"):
        host.materialize(3)
    monkeypatch.undo()
    assert not list((tmp_path / "host").glob("step_000003*"))
    assert_same_as_full_publish(tmp_path / "host" / "step_000002", seq[1], source, tmp_path)
    (tmp_path / "host" / "step_000003.partial").mkdir()  # what a SIGKILL mid-apply leaves behind
    (tmp_path / "host" / "step_000003.partial" / "junk").write_text("x")
    assert_same_as_full_publish(host.materialize(3), seq[2], source, tmp_path)


def test_a_resume_in_the_middle_of_a_chain_restarts_it_from_an_anchor(tmp_path, source):
    """Versions 1 (anchor), 2, 3 published; the trainer resumes from its checkpoint at 2 and
    trains another version 3 (other weights). The host that built the old 3 must not keep it."""
    first = publisher(tmp_path, source)
    weights = tmp_path / "run" / "weights"
    host = LocalVersions(WeightStore(str(weights)), tmp_path / "host")
    seq = states(3)
    for v, state in enumerate(seq, start=1):
        first.publish(state, v)
    host.materialize(3)
    resumed = publisher(tmp_path, source)  # a new trainer process: no memory of version 2's bytes
    shutil.rmtree(weights / "step_000003")  # what run_state.resume does to versions past the checkpoint
    out = resumed.publish(seq[1], 2, force_full=True)  # the start-up publish of the checkpoint's weights
    assert out.weights_kind == "full"
    other = {k: v.clone() for k, v in seq[1].items()}
    other["model.b"].view(-1)[:3] -= 1.0
    assert resumed.publish(other, 3).weights_kind == "delta"
    assert_same_as_full_publish(host.materialize(3), other, source, tmp_path)


@pytest.mark.e2e
def test_a_bf16_run_at_a_low_learning_rate_syncs_by_deltas(tmp_path):
    """The real launcher, two embedded engines, bf16 weights, lr 1e-6: every version after the
    first crosses as a delta of a few percent, and each whole checkpoint the engines reloaded
    holds exactly the tensors the trainer hashed (re-hashed here, independently of the check
    the orchestrator already made before each reload)."""
    import subprocess
    import sys

    from safetensors.torch import load_file as load_tensors

    from tandem.weights.delta import tensor_digest

    repo = Path(__file__).resolve().parents[1]
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "train.py", "--run.run_dir", str(run_dir), "--run.cache_dir", str(repo / ".cache/tandem"),
         "--run.steps", "4", "--sync.encoding", "delta", "--model.dtype", "bfloat16", "--trainer.lr", "1e-6",
         "--logging.live", "off", "--logging.tensorboard", "false", "--checkpoint.interval", "0"],
        cwd=repo, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["weight_version"] for r in rows] == [1, 2, 3, 4]
    full_bytes = rows[0]["publish_bytes"]
    for r in rows[1:]:
        assert 0 < r["changed_fraction"] < 0.05 and r["publish_bytes"] < 0.1 * full_bytes, r
        assert r["apply_time"] > 0
    weights = run_dir / "weights"
    for v in (3, 4):  # the orchestrator keeps the last two whole checkpoints it built
        manifest = json.loads((weights / f"step_{v:06d}" / "manifest.json").read_text())
        assert manifest["kind"] == "delta" and manifest["base_version"] == v - 1
        served = load_tensors(str(weights / "full" / f"step_{v:06d}" / "model.safetensors"))
        assert {k: tensor_digest(t) for k, t in served.items()} == manifest["tensors"]
