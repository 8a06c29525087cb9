"""Helpers for the tests of what a user sees of a run (tests/test_inspect_page.py,
tests/test_run_views.py): a reward the test can hold a run at, a trajectory whose every string is
an attack on the page that shows it, tmux, and a W&B offline run's files read back.
"""

from __future__ import annotations

import glob
import itertools
import json
import os
import shutil
import subprocess
import time
import warnings
from pathlib import Path

GATE_ENV = "TANDEM_TEST_GATE"
SCRIPT_BREAK = "</script><script>window.__pwned = 1; document.title = 'PWNED'</script>"
IMG_ONERROR = '<img src=x onerror="window.__pwned = 2; document.title = \'PWNED\'">'
SVG_ONLOAD = "<svg onload=\"window.__pwned = 3\"></svg><!--"
TMUX = shutil.which("tmux")


HOLD_AFTER = 16
"""Rewards scored before the gate applies: two steps of 2 prompts x 4 samples."""
_scored = itertools.count(1)


def gated_reward(sample, row) -> float:
    """The share of even token ids (a reward that varies in every group). Past HOLD_AFTER calls it
    waits while the file named by $TANDEM_TEST_GATE exists: the run is held after its first step or
    two, whatever the machine's speed, until the test removes the file."""
    gate = os.environ.get(GATE_ENV)
    if next(_scored) > HOLD_AFTER:
        deadline = time.monotonic() + 600
        while gate and os.path.exists(gate) and time.monotonic() < deadline:
            time.sleep(0.05)
    ids = sample.response_ids
    return sum(1 for t in ids if t % 2 == 0) / max(1, len(ids))


def adversarial_sample(encode) -> dict:
    """A sample as rollouts/step_N.json holds it, whose text, verdict, tool calls and end reason
    are markup that would run script if a page ever treated them as HTML. `encode(text) -> ids`."""
    model = encode(SCRIPT_BREAK + IMG_ONERROR)
    observation = encode(SVG_ONLOAD)
    return {
        "prompt_ids": encode("fix it"), "response_ids": model + observation,
        "loss_mask": [1] * len(model) + [0] * len(observation),
        "rollout_logprobs": [-0.5] * len(model) + [0.0] * len(observation),
        "token_versions": [0] * len(model) + [-1] * len(observation), "weight_version": 0,
        "finish_reason": "stop", "reward": 0.0, "advantage": -1.0, "group_id": 0, "prompt_index": 0,
        "response_text": SCRIPT_BREAK,
        "reward_info": {"reason": IMG_ONERROR, "tests": {IMG_ONERROR: "FAILED"}, "tamper": [SCRIPT_BREAK]},
        "metadata": {"env": {"end_reason": SCRIPT_BREAK, "tool_calls": [IMG_ONERROR], "turns": 1},
                     "agent": {"actions": [SVG_ONLOAD], "returncodes": [0]}},
    }


# --------------------------------------------------------------------------- tmux
def tmux(*args: str) -> str:
    return subprocess.run([TMUX, *args], check=True, capture_output=True, text=True).stdout


def tmux_start(session: str, width: int, height: int, command: str, env: dict[str, str]) -> None:
    exports = " ".join(f"{k}={v}" for k, v in env.items())
    tmux("new-session", "-d", "-s", session, "-x", str(width), "-y", str(height), f"env {exports} {command}")


def tmux_screen(session: str, history: bool = False, joined: bool = False) -> list[str]:
    """The pane's visible lines (with `history`, the scrollback above them too; `joined`, a line the
    terminal wrapped is given whole)."""
    args = (["-S", "-200"] if history else []) + (["-J"] if joined else [])
    return tmux("capture-pane", "-p", "-t", session, *args).rstrip("\n").split("\n")


def tmux_kill(session: str) -> None:
    subprocess.run([TMUX, "kill-session", "-t", session], capture_output=True)


# --------------------------------------------------------------------------- W&B offline files
def wandb_offline_history(run_dir: Path) -> tuple[list[dict], dict]:
    """(every history row, the run's config) from the one offline run under run_dir/wandb, read
    with wandb's own record reader (the .wandb file is the log `wandb sync` uploads)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from wandb.proto import wandb_internal_pb2
        from wandb.sdk.internal import datastore
    [path] = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    store = datastore.DataStore()
    store.open_for_scan(path)
    rows, config = [], {}
    while (data := store.scan_data()) is not None:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(data)
        kind = record.WhichOneof("record_type")
        if kind == "history":
            row: dict = {}
            for item in record.history.item:
                key = item.key or "/".join(item.nested_key)
                row[key] = json.loads(item.value_json)
            rows.append(row)
        elif kind == "run":
            config = {u.key: json.loads(u.value_json) for u in record.run.config.update}
    return rows, config
