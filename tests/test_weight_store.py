"""Weight versions through a store: manifests, checksums, atomic listing, pruning, on a local
path and through a real S3 API (moto's server on 127.0.0.1). The one fake is at the edge: a
filesystem whose upload is cut off after its first part."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tandem.config import ConfigError, TandemConfig, load_config
from tandem.weights import ChecksumError, WeightStore, publish_weights
from tandem.weights.store import MANIFEST, verify_dir
from tandem.weights.transport import WeightPublisher, reload_by_agent
from bench._common import start_s3


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = start_s3(tmp_path_factory.mktemp("moto") / "moto.log")
    yield server
    server.stop()


@pytest.fixture
def source(tmp_path) -> Path:
    src = tmp_path / "src"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({"tie_word_embeddings": False}))
    return src


def publish(source: Path, run_dir: Path, version: int) -> Path:
    torch.manual_seed(version)
    state = {"model.w": torch.randn(32, 32), "model.b": torch.randn(32)}
    return publish_weights(state, source, run_dir, version, keep_last=10)


def flip_byte(path: Path, at: int = 100) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


def test_publish_writes_a_manifest_that_catches_a_flipped_byte(source, tmp_path):
    path = publish(source, tmp_path / "run", 1)
    manifest = json.loads((path / MANIFEST).read_text())
    assert manifest["version"] == 1 and set(manifest["files"]) == {"model.safetensors", "config.json"}
    verify_dir(path, manifest)
    flip_byte(path / "model.safetensors")
    with pytest.raises(ChecksumError, match="model.safetensors failed its checksum"):
        verify_dir(path, manifest)
    (path / "config.json").write_text("{}")
    with pytest.raises(ChecksumError, match="config.json has 2 bytes"):
        verify_dir(path, {"version": 1, "files": {"config.json": manifest["files"]["config.json"]}})


def test_versions_round_trip_through_s3_and_prune(s3, source, tmp_path):
    url = s3.make_bucket("roundtrip") + "/run1/weights"
    store = WeightStore(url, s3.storage_options)
    for v in (1, 2, 3):
        store.upload(publish(source, tmp_path / "run", v), v)
    assert store.versions() == [1, 2, 3] and store.latest() == 3
    got = tmp_path / "got"
    store.download(3, got)
    local = tmp_path / "run" / "weights" / "step_000003"
    assert (got / "model.safetensors").read_bytes() == (local / "model.safetensors").read_bytes()
    assert store.prune(2) == [1] and store.versions() == [2, 3]
    assert store.remove_after(2) == [3] and store.versions() == [2]
    assert not s3.filesystem().exists("roundtrip/run1/weights/step_000003")


class CutOffAfterFirstPart:
    """An upload that dies after its first part (a killed trainer, a dropped connection)."""

    def __init__(self, fs):
        self._fs, self.parts = fs, 0

    def put_file(self, lpath, rpath, **kw):
        if self.parts >= 1:
            raise ConnectionError("upload cut off")
        self.parts += 1
        return self._fs.put_file(lpath, rpath, **kw)

    def __getattr__(self, name):
        return getattr(self._fs, name)


def test_an_upload_cut_off_halfway_is_never_listed(s3, source, tmp_path):
    url = s3.make_bucket("cutoff") + "/w"
    honest = WeightStore(url, s3.storage_options)
    honest.upload(publish(source, tmp_path / "run", 1), 1)
    cut = WeightStore(url, fs=CutOffAfterFirstPart(s3.filesystem()))
    with pytest.raises(ConnectionError):
        cut.upload(publish(source, tmp_path / "run", 2), 2)
    assert s3.filesystem().exists("cutoff/w/step_000002/config.json")  # the part that made it
    assert honest.versions() == [1]
    # Re-publishing a version (a resume) unlists it first: the old manifest never vouches for new parts.
    with pytest.raises(ConnectionError):
        WeightStore(url, fs=CutOffAfterFirstPart(s3.filesystem())).upload(tmp_path / "run" / "weights" / "step_000001", 1)
    assert honest.versions() == []


def test_a_corrupted_part_fails_download_naming_the_file(s3, source, tmp_path):
    url = s3.make_bucket("corrupt") + "/w"
    store = WeightStore(url, s3.storage_options)
    path = publish(source, tmp_path / "run", 1)
    store.upload(path, 1)
    flip_byte(path / "model.safetensors")
    s3.filesystem().put_file(str(path / "model.safetensors"), "corrupt/w/step_000001/model.safetensors")
    dest = tmp_path / "local" / "step_000001"
    with pytest.raises(ChecksumError, match=r"weight version 1: model.safetensors failed its checksum"):
        store.download(1, dest)
    assert not dest.exists() and not list((tmp_path / "local").iterdir())  # no partial copy left


def test_a_shared_path_publishes_in_place_and_forgets_newer_versions(source, tmp_path):
    shared = tmp_path / "shared"
    cfg = TandemConfig.model_validate({"run": {"run_dir": str(tmp_path / "run")}, "sync": {"url": str(shared)}})
    publisher = WeightPublisher(cfg, str(source))
    torch.manual_seed(0)
    for v in (1, 2, 3):
        out = publisher.publish({"model.w": torch.randn(4, 4)}, v)
        assert out.weights_path == str(shared / f"step_{v:06d}") and out.weights_url is None
    assert publisher.store.versions() == [1, 2, 3] and not reload_by_agent(cfg)
    assert publisher.forget_after(1) == [2, 3] and publisher.store.versions() == [1]


@pytest.mark.parametrize("argv, message", [
    (["--sync.url", "s3://b/w"], "need engine.backend = 'external'"),
    (["--engine.backend", "external", "--engine.external.urls", '["http://h:1"]', "--sync.url", "s3://b/w",
      "--sync.reload_by", "orchestrator"], "engines cannot load from"),
    (["--engine.backend", "external"], "needs engine.external.urls"),
    (["--engine.external.urls", '["http://h:1"]'], "config key 'engine.external' is read only with engine.backend = 'external'"),
    (["--engine.backend", "external", "--engine.external.urls", '["h:1"]'], "not an http"),
])
def test_external_config_rules_name_the_keys(argv, message):
    with pytest.raises(ConfigError, match=message):
        load_config(argv)


def test_external_engines_count_themselves_and_remote_urls_mean_agents():
    cfg = load_config(["--engine.backend", "external", "--engine.external.urls", '["http://a:1", "http://b:2/"]',
                       "--sync.url", "s3://bucket/run", "--engine.count", "3"])
    assert cfg.engine.count == 2 and cfg.engine.external.urls == ["http://a:1", "http://b:2"] and reload_by_agent(cfg)


def test_the_one_pass_writer_is_safetensors_and_its_digest_is_the_files(tmp_path):
    from safetensors import safe_open
    from safetensors.torch import load_file

    from tandem.weights.safetensors_io import write_safetensors
    from tandem.weights.store import file_digest

    tensors = {"b": torch.randn(3, 5).to(torch.bfloat16), "a": torch.arange(7, dtype=torch.int64),
               "c": torch.randn(2, 2, 2), "m": torch.tensor([True, False]), "s": torch.tensor(2.5)}
    path = tmp_path / "x.safetensors"
    digest = write_safetensors(path, tensors, {"format": "pt"})
    assert digest == file_digest(path)
    back = load_file(str(path))
    assert set(back) == set(tensors) and all(torch.equal(back[k], tensors[k]) for k in tensors)
    with safe_open(str(path), "pt") as fh:
        assert fh.metadata() == {"format": "pt"}


def test_shards_are_written_in_parallel_and_load_as_one_model(tmp_path, source, monkeypatch):
    import tandem.weights.publish as publish

    monkeypatch.setattr(publish, "MIN_PARALLEL_SHARD_BYTES", 1000)
    monkeypatch.setattr(publish, "PUBLISH_WRITERS", 3)
    state = {f"model.layers.{i}.w": torch.randn(40, 40) for i in range(6)}  # 6400 bytes each: 3 shards of 2
    path = publish.publish_weights(state, source, tmp_path / "run", 1, keep_last=1)
    index = json.loads((path / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == [f"model-0000{i}-of-00003.safetensors" for i in (1, 2, 3)]
    verify_dir(path, json.loads((path / MANIFEST).read_text()))
    from safetensors.torch import load_file

    back = {k: v for name in shards for k, v in load_file(str(path / name)).items()}
    assert set(back) == set(state) and all(torch.equal(back[k], state[k]) for k in state)
