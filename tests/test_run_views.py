"""What a user sees of a real run: the live view in a terminal (tmux, at 80 x 24 and 120 x 40,
held between two steps and at the end), the Weights & Biases offline run's files, TensorBoard's
grouped tags, and `tandem inspect`'s page in a real headless browser (Debian's chromium).

Two short default runs share the module, one per terminal size, started together in tmux. Each
scores with tests/_views.py:gated_reward, which past its first two steps' samples waits while a gate
file exists: the run is held mid-way, deterministically, for the "during" capture, until the test
removes the gate.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tandem.metric_groups import GROUPS, grouped_name, metric_group, numeric
from tandem.model_source import build_byte_tokenizer
from tandem.orchestrator.wandb_log import TABLE_COLUMNS
from _browser import CHROMIUM, HeadlessChromium
from _faults import REPO, metrics
from _views import GATE_ENV, IMG_ONERROR, TMUX, adversarial_sample, tmux_kill, tmux_screen, tmux_start, wandb_offline_history

needs_tmux = pytest.mark.skipif(TMUX is None, reason="tmux is not installed (apt-get install -y tmux)")
STEPS = 5
SIZES = {"small": (80, 24), "large": (120, 40)}
READY = "document.body && document.body.dataset.ready === '1'"


def wait(predicate, timeout_s: float, what: str, ended=None):
    """predicate()'s first true value; fails at once, with what `ended()` returns (the child's last screen),
    when the child has exited before that, instead of waiting out the timeout."""
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        if ended is not None and (why := ended()):
            if value := predicate():  # it came true as the child exited
                return value
            raise RuntimeError(f"the run ended before {what}:\n{why}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"gave up waiting for {what}")
        time.sleep(0.2)
    return value


def held_frame(session: str, run_dir: Path) -> list[str] | None:
    """The live view once a step has finished and the next one is rolling out (held by the gate),
    captured once with wrapped lines joined: a line that wrapped is longer than the terminal."""
    screen = tmux_screen(session, joined=True)
    done = (run_dir / "metrics.jsonl").exists() and metrics(run_dir)
    frame = frame_of(screen)
    # the metrics row is written before the view redraws: a frame still drawing step 1 is not yet held
    rolling = [int(m.group(1)) for line in frame if (m := re.match(r"step (\d+): rolling out", line))]
    return frame if done and rolling and rolling[0] >= 2 else None


def frame_of(screen: list[str]) -> list[str]:
    """The live view's lines: from its progress bar down (above it: the launcher's start-up lines)."""
    starts = [i for i, line in enumerate(screen) if line.startswith("steps ")]
    return [line.rstrip() for line in screen[starts[-1]:]] if starts else []


def summary_shown(session: str) -> list[str] | None:
    screen = tmux_screen(session, history=True, joined=True)
    return screen if any(line.strip().startswith("inspect it:") for line in screen) else None


def run_command(run_dir: Path, rc_file: Path) -> str:
    # this interpreter, not whichever `python` the shell's PATH finds first (a venv's need not be on PATH)
    return (f"cd {REPO} && {shlex.quote(sys.executable)} train.py --run-dir {run_dir} --steps {STEPS} --engines 2 "
            f"--rollout.prompts_per_step 2 --rollout.samples_per_prompt 4 --rollout.reward tests/_views.py:gated_reward "
            f"--rollout.reward_timeout_s 600 --logging.tensorboard true --logging.wandb.mode offline "
            f"--checkpoint.interval 2 --run.keep_rollouts all; echo $? > {rc_file}")


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{size: (run dir, screen held mid-run, screen at the end with its scrollback, exit status)}.
    Without tmux, one run off a terminal: the other tests still have their run; the live view's skip."""
    root = tmp_path_factory.mktemp("views")
    if TMUX is None:
        run_dir, rc_file = root / "large", root / "large.rc"
        with open(root / "large.out", "w") as out:
            proc = subprocess.Popen(["bash", "-c", run_command(run_dir, rc_file)], stdout=out, stderr=subprocess.STDOUT,
                                    env={**os.environ, "WANDB_SILENT": "true"})
        try:
            proc.wait(timeout=900)
        finally:
            proc.kill()
        yield {"large": (run_dir, None, (root / "large.out").read_text().splitlines(), int(rc_file.read_text()))}
        return
    sessions = {}
    for size, (width, height) in SIZES.items():
        run_dir, gate = root / size, root / f"{size}.gate"
        session = f"tandem-views-{root.name}-{size}"
        gate.touch()  # rewards wait past the first steps until the test has looked
        tmux_start(session, width, height, f"bash -c '{run_command(run_dir, root / f'{size}.rc')}; sleep 600'",
                   {GATE_ENV: str(gate), "WANDB_SILENT": "true"})
        sessions[size] = (session, run_dir, gate)
    try:
        held = {}
        for size, (session, run_dir, gate) in sessions.items():
            rc_file = root / f"{size}.rc"
            held[size] = wait(lambda: held_frame(session, run_dir), 600, f"{size}: the frame held after the first step",
                              ended=lambda: rc_file.exists() and "\n".join(tmux_screen(session, history=True)))
            assert len(metrics(run_dir)) < STEPS
            gate.unlink()
        out = {}
        for size, (session, run_dir, gate) in sessions.items():
            rc_file = root / f"{size}.rc"
            wait(rc_file.exists, 600, f"{size}: the run's end")
            rc = int(rc_file.read_text())
            # the launcher has exited; tmux may still be drawing its last lines
            end = wait(lambda: summary_shown(session), 60, f"{size}: the summary") if rc == 0 else \
                tmux_screen(session, history=True, joined=True)
            out[size] = (run_dir, held[size], end, rc)
        yield out
    finally:
        for session, _, gate in sessions.values():
            gate.unlink(missing_ok=True)
            tmux_kill(session)


# --------------------------------------------------------------------------- the live view
@needs_tmux
@pytest.mark.parametrize("size", SIZES)
def test_the_live_view_held_mid_run_fits_the_terminal(runs, size):
    width, height = SIZES[size]
    _, held, _, _ = runs[size]
    assert len(held) <= height and max(map(len, held)) <= width
    text = "\n".join(held)
    bar = next(line for line in held if line.startswith("steps "))
    assert "ETA" in bar and f"/{STEPS}" in bar
    assert "smoothed" in text and "best" in text
    rows = [line for line in held if line.startswith(("engine0 ", "engine1 "))]
    assert len(rows) == 2, f"an engine's queue is cut off:\n{text}"
    assert held.index(rows[-1]) < height
    for hidden in ("changed_fraction", "encode_time", "upload_time", "apply_time"):  # 0 on a local full sync
        assert hidden not in text


@needs_tmux
@pytest.mark.parametrize("size", SIZES)
def test_the_last_frame_says_finished_and_the_summary_says_what_next(runs, size):
    run_dir, _, end, rc = runs[size]
    assert rc == 0, "\n".join(end)
    text = "\n".join(end)
    frame = frame_of(end)
    assert f"{STEPS}/{STEPS}" in frame[0] and frame[1] == f"finished {STEPS} steps", "\n".join(frame)
    rows = metrics(run_dir)
    assert f"reward_mean: step 1 {rows[0]['reward_mean']:.4g} -> step {STEPS} {rows[-1]['reward_mean']:.4g}" in text
    assert f"last checkpoint: {run_dir / 'checkpoints' / f'step_{STEPS:06d}'}" in text
    assert f"python train.py --resume {run_dir} --steps {2 * STEPS}" in text
    assert f"tandem inspect {run_dir}" in text


# --------------------------------------------------------------------------- metrics grouped
def test_every_core_metric_has_a_group_other_than_the_environments(runs):
    """A default run has no environment: a core metric that fell through to env/ was left off the lists."""
    rows = metrics(runs["large"][0])
    keys = [k for k in rows[0] if k != "step"]  # the axis, not a metric
    assert {k: metric_group(k) for k in keys if metric_group(k) == "env"} == {}
    # eval/ and alarm/ rows come from [eval] and [alarms]; a default run evaluates nothing (its alarms do log)
    assert {metric_group(k) for k in keys} == set(GROUPS) - {"env", "eval"}


def test_tensorboard_tags_are_grouped(runs):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    run_dir = runs["large"][0]
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    rows = metrics(run_dir)
    expected = {grouped_name(k) for k, v in rows[0].items() if numeric(v) and k != "step"}
    assert set(events.Tags()["scalars"]) == expected
    assert [e.value for e in events.Scalars("rollout/reward_mean")] == pytest.approx([r["reward_mean"] for r in rows])


def test_the_wandb_offline_run_holds_every_metric_the_config_and_the_trajectories(runs):
    run_dir = runs["large"][0]
    history, config = wandb_offline_history(run_dir)
    rows = metrics(run_dir)
    assert [h["step"] for h in history] == [r["step"] for r in rows]
    for logged, row in zip(history, rows):
        for key, value in row.items():
            if numeric(value) and key != "step":
                assert logged[grouped_name(key)] == pytest.approx(value, rel=1e-6), (row["step"], key)
        assert logged["rollout/trajectories/nrows"] == 4 and logged["rollout/trajectories/_type"] == "table-file"
        table = json.loads((next(run_dir.glob("wandb/offline-run-*")) / "files" /
                            logged["rollout/trajectories/path"]).read_text())
        assert table["columns"] == TABLE_COLUMNS and [r[0] for r in table["data"]] == [row["step"]] * 4
        batch = json.loads((run_dir / "rollouts" / f"step_{row['step']:06d}.json").read_text())["samples"]
        assert [r[3] for r in table["data"]] == [s["reward"] for s in batch[:4]]
    assert config["run"]["steps"] == STEPS and config["logging"]["wandb"]["mode"] == "offline"  # the whole config


# --------------------------------------------------------------------------- the inspector, in a browser
@pytest.fixture(scope="module")
def inspected(runs, tmp_path_factory):
    """The large run's page, with an adversary's sample first in step 1's batch."""
    from tandem.inspect.__main__ import main

    run_dir = tmp_path_factory.mktemp("inspected") / "run"  # a copy: the other tests read the run as it was
    shutil.copytree(runs["large"][0], run_dir, ignore=shutil.ignore_patterns("weights", "checkpoints", "wandb"))
    path = run_dir / "rollouts" / "step_000001.json"
    batch = json.loads(path.read_text())
    tokenizer = build_byte_tokenizer()
    batch["samples"].insert(0, adversarial_sample(lambda t: tokenizer.encode(t, add_special_tokens=False)))
    path.write_text(json.dumps(batch))
    assert main([str(run_dir)]) == 0
    shown = sum(len(json.loads(p.read_text())["samples"]) for p in (run_dir / "rollouts").glob("step_*.json"))
    return run_dir / "inspect.html", shown


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium)")
def test_the_page_in_a_real_browser(inspected, tmp_path):
    page_path, shown = inspected
    with HeadlessChromium() as browser:
        page = browser.open(page_path, READY)
        assert page.errors == []
        assert page.evaluate("document.querySelectorAll('.js-plotly-plot').length") >= 10
        for chart in ("queue-chart", "staleness-chart", "token-lag-chart", "step-time-chart"):
            assert page.evaluate(f"!!document.querySelector('#{chart} .main-svg')"), chart
        assert page.evaluate("document.body.dataset.trajectories") == str(shown)
        # the adversary's sample is shown (first), as text: nothing it spells out ran or exists
        assert page.evaluate("window.__pwned === undefined && document.title.indexOf('PWNED') < 0")
        assert page.evaluate("document.querySelectorAll('img, [onerror], [onload]').length") == 0
        assert IMG_ONERROR in page.evaluate("document.getElementById('sample-detail').textContent")
        assert page.evaluate("document.querySelectorAll('#sample-detail .tamper').length") == 1
        page.evaluate("document.getElementById('filter-step').value = '2';"
                      "document.getElementById('filter-step').dispatchEvent(new Event('input'))")
        assert page.evaluate("document.body.dataset.trajectories") == "8"
        page.evaluate("document.getElementById('filter-reward-min').value = '0.6';"
                      "document.getElementById('filter-reward-min').dispatchEvent(new Event('input'))")
        step2 = json.loads((page_path.parent / "rollouts" / "step_000002.json").read_text())["samples"]
        assert page.evaluate("document.body.dataset.trajectories") == str(sum(s["reward"] >= 0.6 for s in step2))
        for mode in ("version", "logprob", "lag", "mask"):
            page.evaluate(f"document.getElementById('colour-by').value = '{mode}';"
                          "document.getElementById('colour-by').dispatchEvent(new Event('input'))")
        assert page.errors == []
        assert page.screenshot(tmp_path / "page.png").stat().st_size > 10_000
