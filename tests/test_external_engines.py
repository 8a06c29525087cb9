"""A multi-node rehearsal on one machine (engine.backend = 'external').

Two engines are started by hand, as a user would on two hosts: `python -m tandem.engine serve`
processes with an API key, each with its own weight agent and local weights directory. Weights
travel through a real S3 API on 127.0.0.1 (moto's server). The run is the real launcher in a
subprocess; it starts the router and the trainer, and never starts or kills an engine. Checks:
- one engine killed and started again mid-run rejoins the router on the current version, and
  every step still trains on a full batch (0 samples lost);
- after the run, every engine's logprobs equal the trainer's final weights within 1e-4;
- a version whose upload was cut off is never loaded; a corrupted file fails its checksum, the
  engine stays on its version, and the agent's error names the file.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import psutil
import pytest
import torch

from tandem import losses
from tandem.config import ConfigError, load_config
from tandem.orchestrator.cluster import external_engines
from tandem.supervisor import ChildFailed
from tandem.ports import free_port
from tandem.weights import SyncError, WeightStore, publish_weights, wait_engine_versions
from bench._common import start_s3
from tests.engine_conformance import wait_http

REPO = Path(__file__).resolve().parents[1]
KEY_ENV, KEY = "TANDEM_REHEARSAL_KEY", "rehearsal-secret"
AUTH = {"Authorization": f"Bearer {KEY}"}
STEPS = 10
TOL = 1e-4


class EngineHost:
    """What one engine host runs: the engine and, beside it, its weight agent."""

    def __init__(self, index: int, root: Path, source: str, storage_options: dict):
        self.name, self.port = f"engine{index}", free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.dir = root / self.name
        self.dir.mkdir(parents=True)
        self.source, self.storage_options = source, storage_options
        self.engine: subprocess.Popen | None = None
        self.agent: subprocess.Popen | None = None
        self.starts = 0

    def _spawn(self, cmd: list[str], log: str) -> subprocess.Popen:
        with open(self.dir / log, "a") as out:
            return subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                    env={**os.environ, KEY_ENV: KEY})

    def start_engine(self) -> None:
        self.starts += 1
        self.engine = self._spawn([sys.executable, "-m", "tandem.engine", "serve", "--port", str(self.port),
                                   "--name", self.name, "--api-key-env", KEY_ENV, "--torch-threads", "1",
                                   "--run.cache_dir", str(REPO / ".cache/tandem")], "engine.log")

    def start_agent(self) -> None:
        self.agent = self._spawn([sys.executable, "-m", "tandem.weights", "agent", "--source", self.source,
                                  "--local-dir", str(self.dir / "weights"), "--engine", self.url,
                                  "--api-key-env", KEY_ENV, "--poll-interval-s", "0.3",
                                  "--storage-options", json.dumps(self.storage_options)], "agent.log")

    def wait_healthy(self, timeout_s: float = 180) -> None:
        wait_http(f"{self.url}/health", self.engine, timeout_s, self.name, self.dir / "engine.log")

    def kill_engine(self) -> None:
        os.killpg(self.engine.pid, signal.SIGKILL)
        self.engine.wait()

    def version(self) -> str:
        return httpx.get(f"{self.url}/model_info", headers=AUTH, timeout=5).json()["weight_version"]

    def agent_log(self) -> str:
        return (self.dir / "agent.log").read_text()

    def stop(self) -> None:
        for proc in (self.agent, self.engine):
            if proc is not None and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    root = tmp_path_factory.mktemp("rehearsal")
    s3 = start_s3(root / "moto.log")
    source = s3.make_bucket("rehearsal") + "/run/weights"
    fleet = [EngineHost(i, root, source, s3.storage_options) for i in range(2)]
    try:
        for host in fleet:
            host.start_engine()
        for host in fleet:
            host.wait_healthy()
            host.start_agent()
        yield root, s3, source, fleet
    finally:
        for host in fleet:
            host.stop()
        s3.stop()


def wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.3)


def metrics_rows(run_dir: Path) -> list[dict]:
    path = run_dir / "metrics.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()] if path.exists() else []


def test_engines_want_the_key_and_the_launcher_names_what_is_wrong(hosts, monkeypatch):
    url = hosts[3][0].url
    assert httpx.get(f"{url}/health").status_code == 200  # open, as in SGLang: routers probe it
    assert httpx.get(f"{url}/model_info").status_code == 401
    assert httpx.post(f"{url}/update_weights_from_disk", json={"model_path": "/x"}).status_code == 401
    monkeypatch.setenv("WRONG_KEY", "not-the-key")
    wrong = load_config(["--engine.backend", "external", "--engine.external.urls", json.dumps([url]),
                         "--engine.api_key_env", "WRONG_KEY"])
    with pytest.raises(ConfigError, match=f"{url} refused the API key .*check \\$WRONG_KEY"):
        external_engines(wrong)
    gone = load_config(["--engine.backend", "external", "--engine.external.urls", f'["http://127.0.0.1:{free_port()}"]',
                        "--engine.startup_timeout_s", "1"])
    with pytest.raises(ChildFailed, match="did not answer GET /health within 1s"):
        external_engines(gone)


def test_a_run_through_s3_survives_an_engine_restart_and_matches_the_trainer(hosts):
    root, s3, source, fleet = hosts
    run_dir = root / "run"
    cmd = [sys.executable, "train.py", "--run.run_dir", str(run_dir), "--run.cache_dir", str(REPO / ".cache/tandem"),
           "--run.steps", str(STEPS), "--run.mode", "async", "--logging.live", "off", "--logging.tensorboard", "false",
           "--checkpoint.interval", "0", "--rollout.sampling.max_new_tokens", "16",
           "--engine.backend", "external", "--engine.external.urls", json.dumps([h.url for h in fleet]),
           "--engine.api_key_env", KEY_ENV, "--sync.url", source,
           "--sync.storage_options", "{endpoint_url = \"%s\"}" % s3.endpoint,
           "--faults.engine_check_interval_s", "0.3"]
    log = root / "train.log"
    with open(log, "w") as out:
        run = subprocess.Popen(cmd, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                               env={**os.environ, KEY_ENV: KEY})
    try:
        wait_for(lambda: len(metrics_rows(run_dir)) >= 2 or run.poll() is not None, 300, "two trained steps")
        fleet[1].kill_engine()
        fleet[1].start_engine()
        hold_until_rejoined(run, run_dir, log)
        assert run.wait(600) == 0, log.read_text()[-3000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
    rows = metrics_rows(run_dir)
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert all(r["samples"] == 8 * 16 for r in rows)  # every step trained on a full batch: 0 samples lost
    rejoined = json.loads((run_dir / "recoveries.json").read_text())
    assert [r["engine"] for r in rejoined] == ["engine1"] and rejoined[0]["cause"] == "refused connections"
    assert fleet[1].starts == 2 and "now serves version" in fleet[1].agent_log()
    wait_for(lambda: all(h.version() == str(STEPS) for h in fleet), 30, f"every engine on version {STEPS}")
    final = root / "final"
    WeightStore(source, s3.storage_options).download(STEPS, final)
    assert_engines_score_like(final, fleet)


def hold_until_rejoined(run: subprocess.Popen, run_dir: Path, log: Path, timeout_s: float = 300) -> None:
    """Wait until the launcher says engine1 rejoined. The run goes on meanwhile, syncing without engine1,
    but with three steps left the trainer is held until it has rejoined: however long the engine takes
    to start on a loaded machine, the run cannot end first (in CI it once did)."""
    trainer = next((p for p in psutil.Process(run.pid).children(recursive=True) if "tandem.trainer" in p.cmdline()),
                   None)
    assert trainer is not None, f"no trainer under the launcher\n{log.read_text()[-3000:]}"
    held, deadline = False, time.monotonic() + timeout_s
    try:
        while not said(log, "rejoined the router") and run.poll() is None:
            if not held and len(metrics_rows(run_dir)) >= STEPS - 3:
                trainer.suspend()
                held = True
            assert time.monotonic() < deadline, f"engine1 did not rejoin within {timeout_s:.0f}s"
            time.sleep(0.1)
    finally:
        if held:
            trainer.resume()


def said(log: Path, what: str) -> bool:
    """The launcher's log has a line about engine1 saying `what`."""
    return any("external engine1 (" in line and what in line for line in log.read_text().splitlines())


def assert_engines_score_like(weights_dir: Path, fleet: list[EngineHost]) -> None:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(weights_dir, torch_dtype=torch.float32).eval()
    prompt = [22, 28]
    for host in fleet:
        out = httpx.post(f"{host.url}/generate", headers=AUTH, timeout=60, json={
            "input_ids": prompt, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 12, "temperature": 1.0, "ignore_eos": True}}).json()
        engine_lp = [t[0] for t in out["meta_info"]["output_token_logprobs"]]
        ids = torch.tensor([prompt + out["output_ids"]])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[:, :-1]
        trainer_lp = losses.token_logprobs(logits, ids[:, 1:], 1.0)[0, len(prompt) - 1:].tolist()
        assert max(abs(a - b) for a, b in zip(engine_lp, trainer_lp)) < TOL, host.name


def test_cut_off_and_corrupted_versions_are_never_loaded(hosts):
    root, s3, source, fleet = hosts
    store = WeightStore(source, s3.storage_options)
    base = store.latest()
    assert base is not None and all(h.version() == str(base) for h in fleet)
    local = root / "next"
    store.download(base, local / "base")
    from safetensors.torch import load_file

    state = load_file(str(local / "base" / "model.safetensors"))

    def new_version(v: int) -> Path:
        moved = {k: t + 0.01 * v for k, t in state.items()}
        return publish_weights(moved, local / "base", local / "run", v, keep_last=10)

    # 1. An upload cut off after its first part: never listed, never loaded.
    class CutOff:
        def __init__(self, fs):
            self._fs, self.calls = fs, 0

        def put_file(self, lpath, rpath, **kw):
            self.calls += 1
            if self.calls > 1:
                raise ConnectionError("upload cut off")
            return self._fs.put_file(lpath, rpath, **kw)

        def __getattr__(self, name):
            return getattr(self._fs, name)

    with pytest.raises(ConnectionError):
        WeightStore(source, fs=CutOff(s3.filesystem())).upload(new_version(base + 1), base + 1)
    # 2. A version whose weights file is corrupted in the store after a complete upload.
    path = new_version(base + 2)
    store.upload(path, base + 2)
    bad = bytearray((path / "model.safetensors").read_bytes())
    bad[-5] ^= 0xFF
    with s3.filesystem().open(f"{source[5:]}/step_{base + 2:06d}/model.safetensors", "wb") as fh:
        fh.write(bytes(bad))
    for host in fleet:
        wait_for(lambda: "model.safetensors failed its checksum" in host.agent_log(), 30,
                 f"{host.name}'s agent to refuse version {base + 2}")
        assert f"weight version {base + 2}: model.safetensors failed its checksum" in host.agent_log()
        assert f"version {base + 1} (" not in host.agent_log()
    assert all(h.version() == str(base) for h in fleet)  # both stay on the previous version
    with pytest.raises(SyncError, match="did not load") as err:
        asyncio.run(check_versions([h.url for h in fleet], base + 2))
    assert sorted(err.value.failed_urls) == sorted(h.url for h in fleet)
    # 3. The next good version is loaded.
    store.upload(new_version(base + 3), base + 3)
    wait_for(lambda: all(h.version() == str(base + 3) for h in fleet), 30, f"version {base + 3} everywhere")
    assert_engines_score_like(local / "run" / "weights" / f"step_{base + 3:06d}", fleet)
    shutil.rmtree(local, ignore_errors=True)


async def check_versions(urls: list[str], version: int) -> None:
    async with httpx.AsyncClient(headers=AUTH) as http:
        await wait_engine_versions(urls, version, timeout_s=2.0, http=http)
