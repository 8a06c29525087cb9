"""The real launcher end to end: engines behind the real sglang-router, the trainer, both modes.

Every process here is real (engine subprocesses on loopback ports, sglang-router, the
trainer process); only the model is tiny. The reward is tests/_faults.py's parity reward:
a tiny random model never earns the echo task's reward, so nothing would train, and neither
staleness nor a weight sync could show in the logprobs.

Every launch runs under a child subreaper (tests/_reaper.py): whatever descendant outlives
the launcher, after a normal finish, a failure, SIGINT or SIGTERM, is caught and fails the
test, however briefly it lived.
"""

from __future__ import annotations

import json
import re
import signal
import socket
import time
from pathlib import Path

import pytest

from tandem.lab.rehearse import replayed_logprobs
from tandem.metric_groups import grouped_name
from _faults import (MARGIN_S, SMALL, Launch, batch, check_batches, children_gone_bound_s, admissions_bound, cursor_draws, metrics,
                     prompt_indices, rows_done)

REPO = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07")
NUMERICS_TOL = 1e-3
"""Mean |Δ logprob| that engine and trainer numerics alone may produce on the same weights (fp32, CPU)."""


def documented_metric_keys() -> list[str]:
    """The metrics.jsonl keys docs/metrics.md promises (every backticked key of its first paragraph,
    the plug-in's own `agent_*` metrics aside)."""
    text = (REPO / "docs" / "metrics.md").read_text()
    section = text.split("# Metrics and the live view", 1)[1].split("`logprob_mismatch` is the mean", 1)[0]
    keys = [k.strip() for block in re.findall(r"`([^`]+)`", section) for k in block.split(",")]
    keys = [k for k in keys if re.fullmatch(r"[a-z_]+", k) and not k.startswith("agent_")]
    assert len(keys) >= 25, keys
    return keys


def finished(launch: Launch, timeout_s: float = 300) -> int:
    """Wait for the launcher; no descendant may outlive it."""
    rc = launch.wait(timeout_s)
    assert launch.shutdown_report(time.time())[1] == [], "a child outlived the launcher"
    return rc


def stop_with(launch: Launch, sig: int) -> int:
    """Send `sig` to the launcher: every child must be gone within the supervisor's grace (+ margin)."""
    sent = time.time()
    launch.os_kill(sig)
    rc = launch.wait(children_gone_bound_s() + 30)
    gone_s, orphans = launch.shutdown_report(sent)
    assert orphans == [], f"descendants outlived the launcher: {orphans}"
    assert gone_s <= children_gone_bound_s(), f"last child gone {gone_s:.1f}s after {signal.Signals(sig).name}"
    assert "tandem: interrupted; stopping all processes" in launch.stderr, "the launcher did not stop its children"
    # every child stops on its SIGTERM (the router had sat on it for its in-flight requests until SIGKILL)
    assert "after SIGTERM: killed" not in launch.stderr, launch.stderr[-2000:]
    for log in sorted((launch.run_dir / "logs").glob("engine*.log")):  # SIGTERM, not the parent-death SIGKILL
        last = log.read_text(errors="replace").rstrip().splitlines()[-1]
        assert "Finished server process" in last, f"{log.name} did not shut down on SIGTERM: {last}"
    print(f"FIGURE children_gone_s[{signal.Signals(sig).name}] = {gone_s:.2f}")
    return rc


# --------------------------------------------------------------------------- what a run leaves behind
def check_logprobs(run: Path, rows: list[dict]) -> list[float]:
    """Each sample's engine logprobs are those of the version it claims, and each step's
    logprob_mismatch is the mean |trainer - engine| with the trainer on version `step - 1` (the
    weights step N trains from), lag included.
    Returns the mismatch recomputed for the steps with stale samples."""
    stale_mismatch = []
    for row in rows:
        samples = batch(run, row["step"])["samples"]
        trainer_logp = replayed_logprobs(run, row["step"] - 1, samples)
        by_version = {v: replayed_logprobs(run, v, [s for s in samples if s["weight_version"] == v])
                      for v in {s["weight_version"] for s in samples}}
        diffs, served = [], {v: iter(lps) for v, lps in by_version.items()}
        for s, trainer in zip(samples, trainer_logp):
            own = next(served[s["weight_version"]])
            mask = s["loss_mask"]
            engine = s["rollout_logprobs"]
            err = [abs(a - b) for a, b, m in zip(own, engine, mask) if m]
            assert sum(err) / len(err) < NUMERICS_TOL, f"step {row['step']}: a sample's logprobs are not those of " \
                f"weight version {s['weight_version']} (mean |Δ| {sum(err) / len(err):.3g})"
            diffs += [abs(a - b) for a, b, m in zip(trainer, engine, mask) if m]
        expected = sum(diffs) / len(diffs)
        assert row["logprob_mismatch"] == pytest.approx(expected, abs=2e-4), (row["step"], expected)
        if row["staleness_max"] > 0:
            stale_mismatch.append(expected)
    return stale_mismatch


def check_tensorboard(run: Path, rows: list[dict]) -> None:
    """Every numeric metric of every step is in the TensorBoard events, at its step, with its value,
    under its group's prefix (train/loss)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    tags = set(events.Tags()["scalars"])
    numeric = [k for k, v in rows[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool) and k != "step"]
    assert {grouped_name(k) for k in numeric} <= tags, sorted({grouped_name(k) for k in numeric} - tags)
    for key in numeric:
        logged = {e.step: e.value for e in events.Scalars(grouped_name(key))}
        assert sorted(logged) == [r["step"] for r in rows], key
        for r in rows:
            assert logged[r["step"]] == pytest.approx(r[key], rel=1e-5, abs=1e-6), (key, r["step"])


def check_plain_lines(stdout: str, rows: list[dict], total: int) -> None:
    """Off a terminal: one line per step, with that step's figures."""
    lines = [line for line in stdout.splitlines() if line.startswith("step ")]
    assert len(lines) == len(rows), lines
    for line, r in zip(lines, rows):
        assert line.startswith(f"step {r['step']}/{total} ")
        assert f"reward_mean={r['reward_mean']:.4g}" in line and f"loss={r['loss']:.4g}" in line


def check_live_view(screen: str, total: int) -> None:
    """On a terminal: the rich view (progress bar to the end, latest metrics, each engine's queue
    sparkline), and no plain per-step lines."""
    text = ANSI.sub("", screen)
    assert f"{total}/{total}" in text, text[-2000:]
    assert "reward_mean" in text and "trainer_idle_ratio" in text
    assert "engine queue depth" in text and "engine0" in text and "engine1" in text
    assert not re.search(r"^step \d+/\d+ reward_mean=", text, re.M), "plain lines printed on a terminal"


# --------------------------------------------------------------------------- tests
@pytest.mark.parametrize("mode,policy,terminal", [pytest.param("sync", "continue", False, id="sync-continue-plain"),
                                                  pytest.param("async", "drain", True, id="async-drain-terminal")])
def test_two_engines_end_to_end(tmp_path, mode, policy, terminal):
    steps = 3
    run = tmp_path / "run"
    # Drain: step 2's requests start at the first sync and must still be decoding at the second,
    # a few hundred ms later, for draining to matter (48 tokens sometimes finished before it).
    new_tokens = "128" if policy == "drain" else "48"
    launch = Launch(run, ["--engines", "2", "--steps", str(steps), "--mode", mode, "--rollout.staleness.partial_rollout", policy,
                          "--rollout.sampling.max_new_tokens", new_tokens, "--sync.keep_last", "8", *SMALL,
                          "--logging.tensorboard", "true", "--logging.live", "auto"], terminal=terminal)
    assert finished(launch) == 0, launch.describe()
    rows = metrics(run)
    assert check_batches(run, steps) == []  # every step: 2 groups of 4, none lost, none twice
    documented = documented_metric_keys()
    for row in rows:
        assert not [k for k in documented if k not in row], "docs/metrics.md documents metrics the run does not log"
        assert row["staleness_max"] <= (0 if mode == "sync" else 1)
        assert row["step_time"] > 0 and 0 <= row["trainer_idle_ratio"] <= 1
    assert rows[-1]["weight_version"] == steps
    stale = check_logprobs(run, rows)
    if mode == "async":
        # The lag is real and is what the metric reports: at least one step trained on samples of
        # the previous version, whose mismatch is well above numerics.
        assert stale and max(stale) > 5 * NUMERICS_TOL, stale
    if policy == "drain":  # drained before every sync: no sample spans a weight update, none aborted
        for step in range(1, steps + 1):
            for s in batch(run, step)["samples"]:
                assert s["metadata"]["finish_weight_version"] == s["weight_version"], (step, s["metadata"])
        assert all(r["recycled_groups"] == 0 for r in rows)
    endpoints = json.loads((run / "endpoints.json").read_text())
    assert endpoints["router"].startswith("http://127.0.0.1:") and len(endpoints["engines"]) == 2
    for name in ("engine0", "engine1", "router", "trainer"):
        assert (run / "logs" / f"{name}.log").exists()
    queue = [json.loads(line) for line in (run / "queue.jsonl").read_text().splitlines()]
    assert {q["engine"] for q in queue} == {"engine0", "engine1"}
    check_tensorboard(run, rows)
    if terminal:
        check_live_view(launch.stdout, steps)
    else:
        check_plain_lines(launch.stdout, rows, steps)


def test_resume_extends_an_oversampled_run_that_aborts(tmp_path):
    """--resume DIR --steps N continues a finished run to N steps: numbering, data cursor, weight
    versions and TensorBoard carry on; with oversampling (one group of slack beyond the 2 a step
    trains) and abort (in-flight groups aborted by each sync and regenerated under the new weights).

    Steps 1 and 2 start together, so the first sync meets nothing in flight; step 3 starts at the
    first sync and its 12 requests of up to 128 tokens (over a second of decoding here) are still
    running when step 2, already rolled out, is trained and synced a few hundred ms later."""
    run = tmp_path / "run"
    steps, extended = 4, 6
    common = ["--engines", "1", "--mode", "async", "--rollout.oversample", "1.5", "--rollout.staleness.partial_rollout", "abort",
              "--rollout.sampling.max_new_tokens", "128", "--checkpoint.interval", "2", *SMALL, "--logging.tensorboard", "true"]
    first = Launch(run, ["--steps", str(steps), *common], tag="first")
    assert finished(first) == 0, first.describe()
    extend = Launch(run, ["--steps", str(extended)], resume=True, tag="extend")
    assert finished(extend) == 0, extend.describe()
    assert f"resuming at step {steps + 1}" in extend.stdout, extend.describe()

    rows = metrics(run)
    assert check_batches(run, extended) == []  # every step once, 8 samples, no prompt trained twice
    assert [r["weight_version"] for r in rows] == list(range(1, extended + 1))
    # The cursor resumed where it stood (the checkpoint's in-flight prompts regenerated first):
    # every trained prompt is among the first draws an uninterrupted run could have admitted.
    trained = set().union(*prompt_indices(run).values())
    assert trained <= set(cursor_draws(run, admissions_bound(run, extended))), trained
    # abort: groups in flight at a sync were aborted by the engine and regenerated once the new
    # version was served, so no sample holds tokens of two versions or claims an older one.
    assert sum(r["recycled_groups"] for r in rows) >= 1, [r["recycled_groups"] for r in rows]
    for step in range(1, extended + 1):
        for s in batch(run, step)["samples"]:
            assert s["metadata"]["finish_weight_version"] == s["weight_version"], (step, s["metadata"])
    check_tensorboard(run, rows)


def test_sigint_leaves_no_child(tmp_path):
    launch = Launch(tmp_path / "run", ["--engines", "2", "--steps", "1000", *SMALL])
    try:
        launch.wait_until(lambda: rows_done(tmp_path / "run") >= 1, 240, "the first step")
        assert stop_with(launch, signal.SIGINT) == 128 + signal.SIGINT, launch.describe()
        # It says what it kept and the start that goes on from there (no checkpoint yet at step 1-9).
        said = launch.stderr.split("tandem: stopped. ", 1)[1]
        assert said.startswith(f"kept in {tmp_path / 'run'}: ") and "--overwrite" in said, said
    finally:
        launch.kill_all()


def test_stall_is_reported_and_sigterm_stops_a_stalled_run(tmp_path):
    """The watchdog names what the run waits on; SIGTERM then stops it, the stopped trainer included."""
    stall_s, check_s = 3.0, 0.5  # check_s: the watchdog's interval (train.watch_children)
    run = tmp_path / "run"
    launch = Launch(run, ["--engines", "1", "--steps", "1000", "--faults.stall_warning_s", str(stall_s), *SMALL])
    try:
        launch.wait_until(lambda: rows_done(run) >= 1, 240, "the first step")
        launch.child("tandem.trainer").suspend()  # a trainer that stopped making progress
        stopped, start = time.monotonic(), len(launch.stderr)
        launch.wait_stderr("tandem: watchdog: no step finished for", stall_s + check_s + 30, start)
        warned_s = time.monotonic() - stopped
        warning = launch.stderr[start:].split("tandem: watchdog:", 1)[1].splitlines()[0]
        assert "waiting on trainer" in warning, warning
        # The last step finished before the trainer was stopped, so the warning is due within
        # stall_warning_s and one watchdog interval of the stop.
        assert warned_s <= stall_s + check_s + MARGIN_S, warned_s
        print(f"FIGURE stall_warning_after_s = {warned_s:.2f} (stall_warning_s = {stall_s})")
        assert stop_with(launch, signal.SIGTERM) == 128 + signal.SIGTERM, launch.describe()
    finally:
        launch.kill_all()


def test_engine_that_cannot_start_stops_everything(tmp_path):
    (tmp_path / "no-model").mkdir()  # a directory, so preflight lets it by (a missing one is refused there)
    launch = Launch(tmp_path / "run", ["--engines", "2", "--steps", "2", "--model.path", str(tmp_path / "no-model"),
                                       *SMALL])
    assert finished(launch, 180) == 1
    # names the child that died first (the engines and the trainer, started together, all fail on an empty
    # model directory) and shows its log tail
    assert re.search(r"(engine[01]|trainer) exited before it was (healthy|ready)", launch.stderr), launch.describe()
    assert "no-model" in launch.stderr


def test_port_in_use_is_a_clear_error(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        launch = Launch(tmp_path / "run", ["--router.port", str(port), "--steps", "1", *SMALL])
        assert finished(launch, 180) == 2
    assert f"router.port = {port}" in launch.stderr and "already in use" in launch.stderr


def test_malformed_rows_are_skipped_and_reported(tmp_path):
    data = tmp_path / "data.jsonl"
    good = [json.dumps({"prompt": f"{d}=", "label": str(d), "length": 8}) for d in range(10)]
    data.write_text("\n".join(good[:5] + ["{not json", json.dumps({"label": "3"})] + good[5:]) + "\n")
    launch = Launch(tmp_path / "run", ["--engines", "1", "--steps", "1", "--mode", "sync", *SMALL,
                                       "--data.path", str(data)])
    assert finished(launch) == 0, launch.describe()
    assert "skipped 2 malformed row(s)" in launch.stderr
    report = json.loads((tmp_path / "run" / "data_report.json").read_text())
    assert report["skipped"] == 2 and report["rows"] == 10


def test_the_fleet_grows_and_shrinks_through_the_real_router(tmp_path):
    """engine.autoscale with a user's policy (tests/fixtures/autoscale_policy.py): a second engine
    process starts after step 1 and leaves after serving 5 steps, while rollouts run (async).
    Nothing is lost or counted twice, every sample is within the staleness bound, and every
    sample's logprobs are those of the version it claims: no engine in the router ever served an
    older one (the joining engine loaded the current version first)."""
    steps = 20  # the fleet changes at about steps 2 and 8; the trainer is held through each change (below)
    run = tmp_path / "run"
    # drain: no sample spans a weight update, so each has exactly one version to be checked against
    launch = Launch(run, ["--engines", "1", "--steps", str(steps), "--mode", "async", "--sync.keep_last", "64",
                          "--rollout.staleness.partial_rollout", "drain",
                          "--rollout.sampling.max_new_tokens", "48", *SMALL, "--engine.autoscale.enabled", "true",
                          "--engine.autoscale.max", "2",
                          "--engine.autoscale.policy", str(REPO / "tests/fixtures/autoscale_policy.py") + ":Scripted"])
    # Hold the trainer from each decision until the fleet has changed: the engine's start-up (seconds,
    # more on a loaded machine) and its drain and stop then cost no steps, so steps are left to serve on
    # two engines, then on one, however long either takes (in CI an engine once joined so late that the
    # run ended before the policy's five steps on two engines).
    scale_log = run / "autoscale.jsonl"

    def decided(engines: int, after: str | None = None) -> bool:
        """The policy asked for `engines` engines (after the event `after`, when given)."""
        entries = [json.loads(x) for x in scale_log.read_text().splitlines()] if scale_log.exists() else []
        since = next((i for i, e in enumerate(entries) if e.get("event") == after), None) if after else -1
        return since is not None and any(e.get("decision") == engines for e in entries[since + 1:])

    def change_line(start: int) -> str:
        """engine1's next autoscale line at or after `start` in the launcher's stderr, once whole."""
        at = launch.stderr.find("tandem: autoscale: engine1 (", start)
        return launch.stderr[at:].partition("\n")[0] + "\n" if at >= 0 and "\n" in launch.stderr[at:] else ""

    pos = 0
    for engines, after, change in ((2, None, "joined"), (1, "joined", "left")):
        launch.wait_until(lambda: decided(engines, after), 240, f"the decision to go to {engines} engine(s)")
        trainer = launch.child("tandem.trainer")
        trainer.suspend()
        try:
            line = launch.wait_until(lambda: change_line(pos), 240, f"engine1 {change}")
        finally:
            trainer.resume()
        assert line.rstrip().endswith(f") {change}"), line
        pos = launch.stderr.find(line, pos) + len(line)
    assert finished(launch) == 0, launch.describe()
    rows = metrics(run)
    assert check_batches(run, steps) == []  # every step: its groups complete, none lost, none twice
    assert all(r["staleness_max"] <= 1 for r in rows)
    check_logprobs(run, rows)
    log = [json.loads(x) for x in (run / "autoscale.jsonl").read_text().splitlines()]
    events = [e for e in log if e.get("event") in ("joined", "left")]
    assert [(e["event"], e["engine"]) for e in events] == [("joined", "engine1"), ("left", "engine1")]
    assert log[-1]["event"] == "closed" and log[-1]["engine_seconds"] >= rows[-1]["engine_seconds"]
    # It joined after the first sync (the policy grows past the warm-up step), so it had a version to
    # load, and loaded it before the router had it.
    assert events[0]["serves_version"] == events[0]["fleet_version"] >= 1, events[0]
    decisions = [e for e in log if "decision" in e]
    assert [d["step"] for d in decisions] == list(range(1, steps + 1)) and all(d["reason"] for d in decisions)
    engines = [r["engines"] for r in rows]
    assert engines[0] == 1 and engines.count(2) >= 5 and engines[-1] == 1, engines
    assert all(r["engine_seconds_per_step"] > 0 for r in rows[1:])
    assert sum(r["engine_seconds_per_step"] for r in rows) == pytest.approx(rows[-1]["engine_seconds"])
    assert (run / "logs" / "engine1.log").exists()  # its own log, like every child
