"""The real launcher end to end: 2 engines behind the real sglang-router, the trainer, both modes.

Every process here is real (engine subprocesses on loopback ports, sglang-router, the
trainer process); only the model is tiny. These tests also cover teardown: after a normal
finish, a failure or SIGINT, no child of the launcher may survive.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tandem.metrics import REQUIRED_KEYS

REPO = Path(__file__).resolve().parents[1]
SMALL = ["--rollout.prompts_per_step", "2", "--rollout.samples_per_prompt", "4", "--logging.tensorboard", "false",
         "--engine.startup_timeout_s", "120"]


def readme_metric_keys() -> list[str]:
    """The metrics.jsonl keys the README's "Metrics and the live view" section promises (every backticked
    key of its first paragraph, the plug-in's own `agent_*` metrics aside)."""
    import re

    text = (REPO / "README.md").read_text()
    section = text.split("## Metrics and the live view", 1)[1].split("`logprob_mismatch` is the mean", 1)[0]
    keys = [k.strip() for block in re.findall(r"`([^`]+)`", section) for k in block.split(",")]
    keys = [k for k in keys if re.fullmatch(r"[a-z_]+", k) and not k.startswith("agent_")]
    assert len(keys) >= 25, keys
    return keys


def launch(run_dir: Path, *args: str, **kw) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "train.py", "--run-dir", str(run_dir), *SMALL, *args], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def assert_all_gone(procs: list[psutil.Process], within_s: float = 10.0) -> None:
    deadline = time.monotonic() + within_s
    alive = procs
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    assert not alive, f"orphans left: {[(p.pid, p.cmdline()[:4]) for p in alive]}"


def run_to_end(run_dir: Path, *args: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, list]:
    proc = launch(run_dir, *args)
    kids: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        for k in descendants(proc.pid):
            kids.setdefault(k.pid, k)
        time.sleep(0.2)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate(timeout=30)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err), list(kids.values())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_engines_two_steps(tmp_path, mode):
    result, kids = run_to_end(tmp_path, "--engines", "2", "--steps", "2", "--mode", mode)
    assert result.returncode == 0, result.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [0, 1]
    documented = readme_metric_keys()
    for row in rows:
        assert not [k for k in REQUIRED_KEYS if k not in row]
        assert not [k for k in documented if k not in row], "README documents metrics the run does not log"
        assert row["samples"] == 8
        assert row["staleness_max"] <= (0 if mode == "sync" else 1)
        assert row["step_time"] > 0 and 0 <= row["trainer_idle_ratio"] <= 1
        if row["staleness_max"] == 0:  # on-policy: only numerics separate engine and trainer
            assert row["logprob_mismatch"] < 1e-3, "engine and trainer disagree on the sampled tokens"
    assert rows[-1]["weight_version"] == 2
    endpoints = json.loads((tmp_path / "endpoints.json").read_text())
    assert endpoints["router"].startswith("http://127.0.0.1:") and len(endpoints["engines"]) == 2
    for name in ("engine0", "engine1", "router", "trainer"):
        assert (tmp_path / "logs" / f"{name}.log").exists()
    queue = [json.loads(line) for line in (tmp_path / "queue.jsonl").read_text().splitlines()]
    assert {q["engine"] for q in queue} == {"engine0", "engine1"}
    assert sorted(p.name for p in (tmp_path / "weights").iterdir()) == ["step_000001", "step_000002"]
    assert len(kids) >= 4
    assert_all_gone(kids)


def test_sigint_leaves_no_child(tmp_path):
    proc = launch(tmp_path, "--engines", "2", "--steps", "1000")
    kids: dict[int, psutil.Process] = {}
    deadline = time.monotonic() + 180
    metrics = tmp_path / "metrics.jsonl"
    while time.monotonic() < deadline and proc.poll() is None:
        for k in descendants(proc.pid):
            kids.setdefault(k.pid, k)
        if metrics.exists() and metrics.read_text().strip():
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    for k in descendants(proc.pid):
        kids.setdefault(k.pid, k)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=20)
    assert proc.returncode == 130
    assert_all_gone(list(kids.values()), within_s=10)


def test_engine_that_cannot_start_stops_everything(tmp_path):
    result, kids = run_to_end(tmp_path, "--engines", "2", "--steps", "2", "--model.path", str(tmp_path / "no-model"),
                              timeout=180)
    assert result.returncode == 1
    assert "engine0" in result.stderr and "no-model" in result.stderr  # names the engine, shows its log tail
    assert_all_gone(kids)


def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result, kids = run_to_end(tmp_path, "--router.port", str(port), "--steps", "1", timeout=180)
    assert result.returncode == 2
    assert f"router.port = {port}" in result.stderr and "already in use" in result.stderr
    assert_all_gone(kids)


def test_malformed_rows_are_skipped_and_reported(tmp_path):
    data = tmp_path / "data.jsonl"
    good = [json.dumps({"prompt": f"{d}=", "label": str(d), "length": 8}) for d in range(10)]
    data.write_text("\n".join(good[:5] + ["{not json", json.dumps({"label": "3"})] + good[5:]) + "\n")
    result, kids = run_to_end(tmp_path / "run", "--engines", "1", "--steps", "1", "--mode", "sync",
                              "--rollout.data_path", str(data))
    assert result.returncode == 0, result.stderr[-2000:]
    assert "skipped 2 malformed row(s)" in result.stderr
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    assert report["skipped"] == 2 and report["rows"] == 10
    assert_all_gone(kids)
