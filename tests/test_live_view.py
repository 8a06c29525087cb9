"""The live view's panel and the closing summary, rendered in this process (the real terminal
captures, with tmux during and after a run, are in tests/test_run_views.py)."""

from __future__ import annotations

import io
import json
from collections import deque
from pathlib import Path

from rich.console import Console

from tandem.orchestrator.live_view import HEADLINE_ENV, HIDDEN_WHILE_ZERO, SHOWN, LiveView, closing_summary

CODING_ROW = {
    "step": 7, "reward_mean": 0.25, "response_len_mean": 190.0, "loss": 0.01, "kl": 0.0, "entropy": 5.5,
    "clip_frac": 0.0, "grad_norm": 0.3, "logprob_mismatch": 2e-7, "staleness_max": 1, "step_time": 1.5,
    "rollout_time": 2.4, "train_time": 1.5, "sync_time": 0.03, "trainer_idle_ratio": 0.01, "gen_tokens_per_s": 317.0,
    "publish_bytes": 569931, "reload_time": 0.02, "changed_fraction": 0.0, "encode_time": 0.0, "upload_time": 0.0,
    "apply_time": 0.0, "reward_errors": 0, "rollout_errors": 0, "env_success_rate": 0.25, "env_turns_mean": 3.0,
    "env_tool_calls_mean": 1.0, "env_format_error_rate": 0.5, "agent_pass_at_1": 0.25, "agent_tamper_rate": 0.0,
    "agent_exec_time_p50_s": 0.1, "agent_sandbox_failures": 0.0, "env_act_s_mean": 0.01,
}
"""A coding-agent step's row: every shown metric and every headline environment metric."""


class Queues:
    """The queue monitor's history, as the view reads it."""

    def __init__(self, engines: int):
        self.history = {f"engine{i}": deque([3, 1, 4, 1, 5, 9, 2, 6] * 8, maxlen=60) for i in range(engines)}


def screen(view: LiveView, width: int, height: int) -> list[str]:
    console = Console(width=width, height=height, record=True, file=io.StringIO(), color_system=None)
    console.print(view.render(width))
    return console.export_text().rstrip("\n").split("\n")


def test_a_coding_agent_step_fits_80_by_24_and_uses_the_width_of_120():
    view = LiveView(20, 0, Queues(2), "off")
    view.set_status("step 8: rolling out (waiting on engines)")
    view.step_done(CODING_ROW)
    small, large = screen(view, 80, 24), screen(view, 120, 40)
    assert len(small) <= 24 and max(map(len, small)) <= 80, "\n".join(small)
    assert small[0].startswith("steps") and "7/20" in small[0] and "ETA" in small[0]
    assert any(line.startswith("engine1 ") for line in small), "the last engine's queue is cut off"
    text = "\n".join(small)
    for key in HEADLINE_ENV:
        assert key in text, key
    assert len(large) < len(small), "120 columns hold three metric columns, so fewer lines"


def test_rows_that_stay_zero_under_this_config_are_hidden_until_they_are_not():
    view = LiveView(20, 0, None, "off")
    view.step_done(CODING_ROW)
    shown = dict(view.shown_metrics())
    assert set(shown) == {k for k in SHOWN if k in CODING_ROW} - HIDDEN_WHILE_ZERO
    view.step_done({**CODING_ROW, "step": 8, "reward_errors": 2})
    view.step_done({**CODING_ROW, "step": 9})  # back to 0: still shown, the run had failures
    assert dict(view.shown_metrics())["reward_errors"] == "0"


def test_the_reward_line_smooths_and_keeps_the_best():
    view = LiveView(5, 0, None, "off")
    for step, reward in enumerate([0.0, 1.0, 0.0], 1):
        view.step_done({**CODING_ROW, "step": step, "reward_mean": reward})
    track = view.reward
    assert track.values == [0.0, 1.0, 0.0]
    assert track.smoothed == 0.3 * 0.7  # 0 -> 0.3 -> 0.21
    assert track.best == (0.3, 2)
    assert track.line() == "reward_mean 0  smoothed 0.21  best 0.3 (step 2)"


def test_the_closing_summary_names_the_checkpoint_and_the_commands(tmp_path: Path):
    rows = [{"step": 1, "reward_mean": 0.1}, {"step": 2, "reward_mean": 0.5}]
    lines = closing_summary(tmp_path, rows, 3725.0)
    assert lines[0].startswith("tandem: finished 2 steps in 1:02:05")
    assert "step 1 0.1 -> step 2 0.5" in lines[1] and "best 0.22 at step 2" in lines[1]
    assert "cannot be resumed" in lines[2] and not any("--resume" in line for line in lines)
    assert lines[-1].strip() == f"inspect it:      tandem inspect {tmp_path}"
    ckpt = tmp_path / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    (ckpt / "orchestrator.json").write_text(json.dumps({}))
    lines = closing_summary(tmp_path, rows, 5.0)
    assert lines[2].strip() == f"last checkpoint: {ckpt}"
    assert lines[3].strip() == f"continue it:     python train.py --resume {tmp_path} --steps 4"
    assert closing_summary(tmp_path, [], 1.0)[0].startswith("tandem: no step finished")



def test_the_closing_summary_speaks_the_users_command_and_names_failures_and_wandb(tmp_path: Path):
    ckpt = tmp_path / "checkpoints" / "step_000002"
    ckpt.mkdir(parents=True)
    (ckpt / "orchestrator.json").write_text(json.dumps({}))
    rows = [{"step": 1, "reward_mean": 0.1, "reward_errors": 2}, {"step": 2, "reward_mean": 0.5, "reward_errors": 1,
                                                                   "rollout_errors": 4}]
    lines = closing_summary(tmp_path, rows, 5.0, command="tandem train", wandb_mode="offline")
    assert f"continue it:     tandem train --resume {tmp_path} --steps 4" in [line.strip() for line in lines]
    assert any(line.strip().startswith("failed:          3 reward(s), 4 rollout sample(s)") for line in lines)
    assert any(f"wandb sync {tmp_path / 'wandb'}" in line for line in lines)
    assert not any("W&B" in line for line in closing_summary(tmp_path, rows, 5.0))
