"""Plug-in and data edges the launcher tests never reach: broken rewards, bad plug-in paths,
parquet data, and a sandbox that has no backend at all."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tandem.rollout import DataError, PluginError, load_dataset_rows, load_plugin, score_sample
from tandem.errors import RunFatal
from tandem.sample import Sample
from tandem.envs.coding.sandbox import SandboxInfraError

REPO = Path(__file__).resolve().parents[1]


def score(reward_fn, timeout_s: float = 5.0) -> tuple[float, dict]:
    with ThreadPoolExecutor(2) as pool:
        return asyncio.run(score_sample(reward_fn, Sample(prompt_ids=[1]), {"prompt": "p"}, timeout_s, pool))


def test_a_reward_that_raises_or_hangs_scores_zero_with_the_reason():
    def broken(sample, row):
        raise ValueError("no label")

    reward, info = score(broken)
    assert reward == 0.0 and info["reason"] == "error: ValueError: no label"

    def slow(sample, row):
        time.sleep(1.0)
        return 1.0

    reward, info = score(slow, timeout_s=0.2)
    assert reward == 0.0 and info["reason"].startswith("timeout: reward took longer than 0.2s")
    assert info["reward_time"] == 0.2  # the sample is given up at the timeout, not when the reward ends

    reward, info = score(lambda s, r: "high")
    assert reward == 0.0 and "not a number" in info["reason"]
    assert score(lambda s, r: (0.5, {"why": "half"})) == (0.5, {"why": "half", "reward_time": pytest.approx(0, abs=1)})


def test_a_reward_that_asks_to_stop_the_run_is_not_turned_into_a_zero():
    def failing_sandbox(sample, row):
        raise SandboxInfraError("the sandbox failed 5 times in a row")

    assert issubclass(SandboxInfraError, RunFatal)
    with pytest.raises(SandboxInfraError, match="5 times in a row"):
        score(failing_sandbox)


def test_bad_plugin_paths_name_the_spec_and_the_cause(tmp_path):
    (tmp_path / "plug.py").write_text("def reward(sample, row):\n    return 1.0\n")
    assert load_plugin(f"{tmp_path / 'plug.py'}:reward", "rollout.reward")(None, None) == 1.0
    cases = {
        "no_colon_here": "must look like 'module:function'",
        f"{tmp_path / 'missing.py'}:reward": "does not exist",
        "tandem_no_such_module:reward": "cannot import tandem_no_such_module",
        f"{tmp_path / 'plug.py'}:nope": "has no function nope",
    }
    for spec, cause in cases.items():
        with pytest.raises(PluginError, match="rollout.reward") as err:
            load_plugin(spec, "rollout.reward")
        assert cause in str(err.value) and spec in str(err.value), str(err.value)


def test_parquet_data_loads_like_jsonl(tmp_path):
    import datasets

    rows = [{"prompt": "say hi", "label": "hi"}, {"prompt": "say yo", "label": "yo"}, {"prompt": "", "label": "x"}]
    datasets.Dataset.from_list(rows).to_parquet(str(tmp_path / "d.parquet"))
    ds = load_dataset_rows(str(tmp_path / "d.parquet"), "prompt")
    assert [r["prompt"] for r in ds.rows] == ["say hi", "say yo"] and [r["_index"] for r in ds.rows] == [0, 1]
    assert ds.skipped == 1
    with pytest.raises(DataError, match="must be .jsonl, .json or .parquet"):
        (tmp_path / "d.csv").write_text("prompt\nx\n")
        load_dataset_rows(str(tmp_path / "d.csv"), "prompt")


@pytest.mark.e2e
def test_auto_sandbox_refuses_to_run_commands_when_no_backend_works(tmp_path):
    """Neither bwrap nor unshare on PATH: a clear error naming bubblewrap, never an unisolated command."""
    code = "from tandem.envs.coding.sandbox.isolation import detect_backend; detect_backend('auto')"
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PATH": str(tmp_path), "PYTHONPATH": str(REPO)})
    assert out.returncode != 0
    assert "SandboxUnavailable: no sandbox backend works: install bubblewrap" in out.stderr, out.stderr[-500:]
