"""The embedded engine against the SGLang API conformance suite (tests/engine_conformance.py):
directly, through a real sglang-router, and (with $TANDEM_SGLANG_URL) a real SGLang server,
plus embedded-only checks: startup errors, the thread-count default, SamplingParams parsing."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine_conformance import *  # noqa: F401,F403  (fixtures and conformance tests)
from engine_conformance import ROOT, write_run_config

ENGINE_BACKEND = "embedded"


def test_bad_model_path_exits_fast_with_one_clear_line(tmp_path: Path) -> None:
    conf = write_run_config(tmp_path / "config.json", "embedded")
    import json

    tree = json.loads(conf.read_text())
    missing = str(tmp_path / "no_such_model")
    tree["model"]["path"] = missing
    conf.write_text(json.dumps(tree))
    t0 = time.time()
    p = subprocess.run([sys.executable, "-m", "tandem.engine", "--run-config", str(conf), "--port", "1",
                        "--name", "bad"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert p.returncode != 0
    errors = [line for line in p.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1 and missing in errors[0], p.stderr
    assert time.time() - t0 < 60


def test_non_loopback_host_refused(tmp_path: Path) -> None:
    conf = write_run_config(tmp_path / "config.json", "embedded")
    p = subprocess.run([sys.executable, "-m", "tandem.engine", "--run-config", str(conf), "--port", "1",
                        "--host", "0.0.0.0"], cwd=ROOT, capture_output=True, text=True, timeout=60,
                       env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert p.returncode != 0 and "loopback" in p.stderr


def test_sampling_params_parsing() -> None:
    from tandem.engine.core import InvalidRequest, SamplingParams

    p = SamplingParams.from_dict({"temperature": 0, "stop": "x", "stop_token_ids": [3], "top_k": 5, "frequency_penalty": 0,
                                  "max_new_tokens": 7, "unknown_field": 1})
    assert p.greedy and p.stop == ["x"] and p.stop_token_ids == [3] and p.max_new_tokens == 7
    assert SamplingParams.from_dict(None).max_new_tokens == 128
    for bad in ({"top_k": 0}, {"min_p": 2}, {"n": 2}, {"temperature": "hot"}, {"stop_token_ids": [999]},
                {"frequency_penalty": 0.5}, {"regex": "a+"}):
        with pytest.raises(InvalidRequest):
            SamplingParams.from_dict(bad, vocab_size=259)


def test_default_torch_threads_leave_room() -> None:
    from tandem.engine.__main__ import default_torch_threads

    assert default_torch_threads(1) >= 1
    assert default_torch_threads(10 ** 6) == 1
