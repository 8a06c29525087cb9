"""Fault injection against the real launcher, engines, sglang-router and trainer (CPU, tiny model).

1. kill -9 of one engine mid-step, in sync and async mode; 4. SIGSTOP of one engine:
   the engine doctor notices, takes it out of the router, restarts it on its port with the
   current weights and puts it back; the run finishes every step on exactly the intended
   samples (`test_engine_faults_recovered`).
2./3./5. One run directory taken through a chain of crashes, each followed by `--resume`:
   a checkpoint write that fails (a really full disk on a tmpfs when root, else an injected
   ENOSPC halfway), Ctrl-C during a checkpoint, during a weight sync and during rollout, and
   kill -9 of the launcher's whole process group. Every stop leaves no child behind; every
   resume picks the last complete checkpoint; at the end the run has trained every step
   exactly once, on the prompts an uninterrupted run draws, never on a prompt twice, and
   its final weights are bitwise those of one uninterrupted trainer fed the same batches
   (`test_crash_chain_resumes_exactly`). With TANDEM_FAULTS_REFERENCE_RUNS=1 it also runs
   two uninterrupted runs and reports how far their weights are (not bitwise: engine
   sampling is not seeded per request). The in-process half-way failures of each half of a
   checkpoint write are in `test_checkpoint_write_failures_keep_the_previous_checkpoint`.
6. Figures (detection, recovery, samples lost) are printed as `FIGURE name = value` lines
   (run with -s) and appended to $TANDEM_FAULT_FIGURES when that is set.

A phase that lasts milliseconds on a tiny model (a checkpoint's finalize, a weight sync) is
held open by a FaultHold (tests/_faults.py), a RunHooks object the test's instrumented launcher
(`python -m tests._faults --hold PHASE:N:S ...`) passes to the real one; the hold announces
itself on stderr; rollout is caught by polling the engines' /v1/loads.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import threading
import time
from pathlib import Path

import httpx
import psutil
import pytest

from _faults import (GROUP, INSTRUMENTED, MARGIN_S, PROMPTS, SMALL, Launch, base_weights, batch, check_batches, checkpoint_state,
                     children_gone_bound_s, cursor_draws, final_weights, l2, metrics, mount_tmpfs, prompt_indices, record, rel_l2,
                     remount_tmpfs, replay_weights, rows_done, survivors, umount)
from tandem.engine_api import LOADS_ROUTE, parse_load

UNRESPONSIVE_S = 3.0
CHECK_S = 0.5
FAULTS = ["--faults.engine_unresponsive_s", str(UNRESPONSIVE_S), "--faults.engine_check_interval_s", str(CHECK_S)]
PROBE_S = 2.0
"""Longest /health probe the engine doctor waits for (tandem/orchestrator/fleet.py)."""


class TrainerBrake:
    """Keeps a run from finishing before an engine is back.

    On a fast box the remaining steps can all finish on the surviving engine while the
    victim is still restarting; the test could then not see the restart counted. When the
    run has written `rows` metrics rows before `done()` holds, the trainer is paused
    (SIGSTOP) until it does. The engines, router and doctor keep running, so what is being
    tested is not affected; whether the brake was needed is printed.
    """

    def __init__(self, launch: Launch, run_dir: Path, rows: int, done):
        self.launch, self.run_dir, self.rows, self.done = launch, run_dir, rows, done
        self.used = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        trainer = None
        while not self._stop.is_set() and not self.done():
            if trainer is None and rows_done(self.run_dir) >= self.rows:
                trainer = self.launch.child("tandem.trainer")
                trainer.suspend()
                self.used = True
            time.sleep(0.05)
        if trainer is not None:
            try:
                trainer.resume()
            except psutil.NoSuchProcess:  # the launcher already tore the run down
                pass

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def weight_version(url: str) -> int:
    return int(httpx.get(f"{url}/get_weight_version", timeout=5).json()["weight_version"])


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_engine_faults_recovered(tmp_path, mode):
    """kill -9 engine1 mid-step, then SIGSTOP engine0 mid-step: both detected, replaced, nothing lost."""
    steps = 10
    run = tmp_path / "run"
    # One request per sample: a step's 8 requests spread over both engines. With one request per
    # group, a 2-group step lands wholly on the live engine one time in four, and then no sync
    # rollout waits on the silent one (seen in CI: the longest rollout was 0.48 s).
    launch = Launch(run, ["--engines", "2", "--steps", str(steps), "--mode", mode, "--checkpoint.interval", "0",
                          "--rollout.client.group_request", "false", *FAULTS, *SMALL])
    brakes: list[TrainerBrake] = []
    try:
        # --- kill -9 engine1 while a step's requests are in flight. In sync mode the next
        # step's groups are launched the moment a metrics row is written; in async mode the
        # producer is always a step ahead.
        launch.wait_until(lambda: rows_done(run) >= 1, 240, "the first step")
        victim = launch.engine("engine1")
        urls = {e["name"]: e["url"] for e in json.loads((run / "endpoints.json").read_text())["engines"]}
        victim.kill()
        killed_at = time.monotonic()
        # Hold the run early enough to leave steps for the second fault; released below.
        go = threading.Event()
        brakes.append(TrainerBrake(launch, run, 3, go.is_set))
        launch.wait_stderr("tandem: engine1 exited (signal 9)", 30)
        kill_detect_s = time.monotonic() - killed_at
        pos = launch.wait_stderr("tandem: engine1 back after", 180)
        kill_back_s = time.monotonic() - killed_at
        # The new engine1 serves the weights the others serve, not the base model.
        v1, v0 = weight_version(urls["engine1"]), weight_version(urls["engine0"])
        assert abs(v1 - v0) <= 1 and v1 >= 1, (v1, v0)

        # --- SIGSTOP engine0 mid-step: alive but silent. Right after row r is written, step
        # r+1 (sync) or r+2 (async) has just been launched, so requests are in flight.
        n = rows_done(run)
        go.set()
        launch.wait_until(lambda: rows_done(run) > n, 60, "a step after engine1 came back")
        hung = launch.engine("engine0")
        hung.suspend()
        stopped_at = time.monotonic()
        stopped_rows = rows_done(run)
        assert stopped_rows <= steps - 4, "too few steps left for the SIGSTOP to hit a rollout"
        # Brake once two more rows exist: a step launched after the SIGSTOP reaches the silent
        # engine first. Two steps are still left then, so the run cannot finish within one poll
        # of the brake (a tiny step trains in ~60 ms; braking at the last row but one lost that race).
        brakes.append(TrainerBrake(launch, run, stopped_rows + 2, lambda: "engine0 back after" in launch.stderr))
        launch.wait_stderr("tandem: engine0 unresponsive", 30, pos)
        hang_detect_s = time.monotonic() - stopped_at
        launch.wait_stderr("tandem: engine0 back after", 180, pos)
        hang_back_s = time.monotonic() - stopped_at
        rc = launch.wait(240)
    finally:
        for brake in brakes:
            brake.release()
        launch.kill_all()
    assert rc == 0, launch.describe()
    assert launch.shutdown_report(time.time())[1] == [], "a child outlived the launcher"

    # Both faults were real: the killed engine is gone, the stopped one was killed, not left hanging.
    assert not survivors([victim, hung], 5), "a faulted engine process is still running"

    # Every step trained on exactly prompts*G samples: none lost, none counted twice.
    assert check_batches(run, steps) == []
    rows = metrics(run)
    assert rows[-1]["engine_restarts"] == 2
    assert [r["engine_restarts"] for r in rows] == sorted(r["engine_restarts"] for r in rows)
    recoveries = json.loads((run / "recoveries.json").read_text())
    assert [(r["engine"], r["cause"].split()[0]) for r in recoveries] == [("engine1", "exited"),
                                                                           ("engine0", "unresponsive")]
    # Detection as the launcher measured it (last good /health -> verdict), bounded by the configured
    # intervals: an exit within a check interval and a probe after the last good probe; a hang never
    # before engine_unresponsive_s, and within a check and a probe after it. MARGIN_S is scheduling on
    # a loaded 2-core machine; the test's own polling latency is not part of what is bounded.
    assert recoveries[0]["detect_s"] <= 2 * CHECK_S + PROBE_S + MARGIN_S, recoveries[0]
    assert UNRESPONSIVE_S <= recoveries[1]["detect_s"] <= UNRESPONSIVE_S + CHECK_S + PROBE_S + MARGIN_S, recoveries[1]
    # The faults hit traffic, and still no sample was lost: requests reached the killed engine (the
    # router logged each failed send and answered it from the other engine), and in sync mode a
    # step's requests sat on the silent engine until the doctor replaced it (~engine_unresponsive_s).
    # Async steps stream past groups stuck on the silent engine, so they need not wait.
    router_log = (run / "logs" / "router.log").read_text(errors="replace")
    failed_sends = {name: router_log.count(f"worker_url={url} route=/generate") for name, url in urls.items()}
    assert failed_sends["engine1"] >= 1, failed_sends
    longest_rollout_s = max(r["rollout_time"] for r in rows)
    if mode == "sync":
        assert longest_rollout_s >= UNRESPONSIVE_S - CHECK_S - 0.5, longest_rollout_s

    record(f"{mode}.kill9.detect_s_observed", round(kill_detect_s, 2))
    record(f"{mode}.kill9.back_s_observed", round(kill_back_s, 2))
    record(f"{mode}.sigstop.detect_s_observed", round(hang_detect_s, 2))
    record(f"{mode}.sigstop.back_s_observed", round(hang_back_s, 2))
    record(f"{mode}.recoveries", [{k: (round(v, 2) if isinstance(v, float) and k != "at" else v)
                                         for k, v in r.items() if k != "at"} for r in recoveries])
    record(f"{mode}.samples_lost", steps * PROMPTS * GROUP - sum(r["samples"] for r in rows))
    record(f"{mode}.requests_retried_by_client", rows[-1]["requests_retried"])
    record(f"{mode}.router_failed_sends", failed_sends)
    record(f"{mode}.longest_rollout_s", round(longest_rollout_s, 2))
    record(f"{mode}.trainer_brake_used", [b.used for b in brakes])


def test_an_engine_that_keeps_failing_stops_the_run(tmp_path):
    """faults.max_engine_restarts = 1: the first kill -9 is recovered, the second stops the run
    with the cause, the limit and the engine's log tail; nothing outlives the launcher."""
    run = tmp_path / "run"
    launch = Launch(run, ["--engines", "1", "--steps", "1000", "--faults.max_engine_restarts", "1", *FAULTS, *SMALL])
    try:
        launch.wait_until(lambda: rows_done(run) >= 1, 240, "the first step")
        launch.engine("engine0").kill()
        pos = launch.wait_stderr("tandem: engine0 back after", 180)
        launch.engine("engine0").kill()  # the restarted incarnation
        rc = launch.wait(120)
    finally:
        launch.kill_all()
    assert rc == 1, launch.describe()
    error = launch.stderr[pos:]
    assert "engine0 failed again (exited (signal 9)) after 1 restart(s) (faults.max_engine_restarts = 1)" in error, \
        launch.describe()
    assert "last lines of" in error and "engine0.log" in error and "tandem.engine" in error  # the log tail
    assert launch.shutdown_report(time.time())[1] == [], "a child outlived the launcher"
    assert [r["engine"] for r in json.loads((run / "recoveries.json").read_text())] == ["engine0"]


# =============================================================================== checkpoint writes (in-process)
def test_checkpoint_write_failures_keep_the_previous_checkpoint(tmp_path, monkeypatch):
    """Each half of a checkpoint failing halfway (and a full disk refused up front): a clear
    CheckpointError, no partial directory left, the previous checkpoint still the one picked."""
    import torch

    from tandem import checkpoint

    weights = tmp_path / "weights" / "step_000002"
    weights.mkdir(parents=True)
    (weights / "model.safetensors").write_bytes(b"w" * 1000)

    def orchestrator(step):
        return {"step": step, "weight_version": step, "cursor": {"epoch": 0, "position": 2 * step}}

    checkpoint.save_trainer_part(tmp_path, 2, 0, {"w": torch.ones(100)}, weights)
    checkpoint.finalize(tmp_path, 2, orchestrator(2), keep_last=2)
    assert checkpoint.latest(tmp_path) == checkpoint.final_dir(tmp_path, 2)

    class FullDisk:  # pickled after the tensors' records: the .partial file is half written
        def __reduce__(self):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with pytest.raises(checkpoint.CheckpointError, match="checkpoint 4 .*No space left on device.*previous"):
        checkpoint.save_trainer_part(tmp_path, 4, 0, {"w": torch.ones(100), "x": FullDisk()}, weights)
    assert not checkpoint.tmp_dir(tmp_path, 4).exists()

    real_usage = shutil.disk_usage
    monkeypatch.setattr(checkpoint.shutil, "disk_usage",
                        lambda p: real_usage(p)._replace(free=100))  # less than 100 floats need
    with pytest.raises(checkpoint.CheckpointError, match="not enough free disk for checkpoint 4"):
        checkpoint.save_trainer_part(tmp_path, 4, 0, {"w": torch.ones(100)}, weights)
    assert not checkpoint.tmp_dir(tmp_path, 4).exists()
    monkeypatch.undo()

    def fsync_on_full_disk(path):  # orchestrator.json half on disk, then ENOSPC
        part = Path(path) / "orchestrator.json"
        part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(part))
    checkpoint.save_trainer_part(tmp_path, 4, 0, {"w": torch.ones(100)}, weights)
    monkeypatch.setattr(checkpoint, "_fsync_tree", fsync_on_full_disk)
    with pytest.raises(checkpoint.CheckpointError, match="writing checkpoint 4 .*No space left on device"):
        checkpoint.finalize(tmp_path, 4, orchestrator(4), keep_last=2)
    monkeypatch.undo()
    assert not checkpoint.tmp_dir(tmp_path, 4).exists() and not checkpoint.final_dir(tmp_path, 4).exists()
    assert checkpoint.complete_steps(tmp_path) == [2]

    # A crash between the parts and the rename leaves a .tmp holding every part: never picked.
    checkpoint.save_trainer_part(tmp_path, 4, 0, {"w": torch.ones(100)}, weights)
    (checkpoint.tmp_dir(tmp_path, 4) / "orchestrator.json").write_text(json.dumps(orchestrator(4)))
    assert checkpoint.latest(tmp_path) == checkpoint.final_dir(tmp_path, 2)
    assert checkpoint.discard_partials(tmp_path) == [".step_000004.tmp"]
    state = torch.load(checkpoint.final_dir(tmp_path, 2) / "trainer_rank000.pt", weights_only=False)
    assert torch.equal(state["w"], torch.ones(100))
    assert (checkpoint.final_dir(tmp_path, 2) / "hf" / "model.safetensors").read_bytes() == b"w" * 1000


# =============================================================================== the crash chain
CHAIN_STEPS = 8
CHAIN = ["--engines", "1", "--steps", str(CHAIN_STEPS), "--mode", "async", "--checkpoint.interval", "2",
         "--checkpoint.keep_last", "2", "--run.seed", "7", "--rollout.sampling.max_new_tokens", "24", *FAULTS, *SMALL]
CHILDREN_GONE_S = children_gone_bound_s()
REFERENCE_RUNS = os.environ.get("TANDEM_FAULTS_REFERENCE_RUNS") == "1"
"""Also run two uninterrupted runs alongside the chain and measure how far the final weights are
from theirs (about two more launches of CPU; off by default)."""
RESUME_NOISE_FACTOR = 1.5
"""With the reference runs: the chain's distance to each may exceed the two references' distance to
each other by this factor (three samples of run-to-run noise; they measured 0.152 vs 0.148)."""


def in_flight(run: Path, since_wall: float) -> bool:
    """An engine of the launch started at `since_wall` holds generate requests (GET /v1/loads)."""
    path = run / "endpoints.json"
    if not path.exists() or path.stat().st_mtime < since_wall - 1:
        return False
    for e in json.loads(path.read_text())["engines"]:
        try:
            load = parse_load(httpx.get(f"{e['url']}{LOADS_ROUTE}", timeout=1).json())
        except (httpx.HTTPError, ValueError):
            continue
        if load.requests > 0:
            return True
    return False


def resumed_at(launch: Launch, timeout_s: float = 240) -> int:
    """The checkpoint the launcher resumes from: the steps done (it says it resumes at the next one)."""
    launch.wait_until(lambda: "resuming at step" in launch.stdout, timeout_s, "the resume line")
    line = next(x for x in launch.stdout.splitlines() if "resuming at step" in x)
    return int(line.split("resuming at step ")[1].split()[0]) - 1


def test_crash_chain_resumes_exactly(tmp_path):
    """Disk full, Ctrl-C in checkpoint / sync / rollout, kill -9 of the group; resume after each."""
    run = tmp_path / "run"
    ckpt_mount = run / "checkpoints"
    tmpfs = os.environ.get("TANDEM_FAULTS_NO_TMPFS") != "1" and mount_tmpfs(ckpt_mount, "3m")
    launches: list[Launch] = []
    history: list[str] = []
    problems: list[str] = []  # failures that do not block the later stages; all asserted at the end
    completed: dict[int, set[int]] = {}
    t0 = time.monotonic()

    def note(text: str) -> None:
        history.append(f"{time.monotonic() - t0:.0f}s {text}")

    def stop(launch: Launch, sig: int, what: str, *, group: bool = False) -> None:
        """Send `sig` to the launcher (Ctrl-C) or its whole process group (kill -9); every child
        it ever started must be gone within CHILDREN_GONE_S."""
        children = list(launch.seen.values())
        assert len(children) >= 3, f"{what}: expected engine, router and trainer; saw {len(children)} processes"
        sent = time.time()
        (os.killpg if group else os.kill)(launch.pid, sig)
        launch.wait(CHILDREN_GONE_S + 30)
        launcher_exit_s = time.time() - sent
        children_s, orphans = launch.shutdown_report(sent)  # every descendant, not only those polled
        if orphans:
            problems.append(f"{what}: {len(orphans)} descendant(s) outlived the launcher: {orphans}")
        if children_s > CHILDREN_GONE_S:
            problems.append(f"{what}: the last child was gone {children_s:.1f}s after the signal "
                            f"(bound: {CHILDREN_GONE_S:.0f}s)")
        record(f"chain.{what}", {"children_gone_s": round(children_s, 2), "launcher_exit_s": round(launcher_exit_s, 2)})

    def resume(tag: str, hold: str | None = None, args: list[str] | None = None) -> tuple[Launch, int]:
        """--resume: it must pick the latest complete checkpoint and keep the steps before it."""
        expect = checkpoint_state(run)["complete"][-1]
        before = prompt_indices(run)
        wrapper = INSTRUMENTED + (["--hold", hold] if hold else [])
        launch = Launch(run, args or [], resume=True, tag=tag, wrapper=wrapper)
        launches.append(launch)
        at = resumed_at(launch)
        assert at == expect, f"{tag}: resumed at {at}, the latest complete checkpoint is {expect}"
        kept = [r["step"] for r in metrics(run)][:at]
        if kept != list(range(1, at + 1)):  # checkpoint `at` promises metrics rows 1..at
            problems.append(f"{tag}: resumed after step {at} but metrics.jsonl holds steps {kept}: a gap")
        for step, idx in before.items():
            if step <= at:  # a completed step: its batch (and so its prompts) is never redrawn
                assert completed.setdefault(step, idx) == idx, f"{tag}: step {step}'s batch changed"
        note(f"{tag}: resumed at step {at}")
        return launch, at

    refs: list[Launch] = []
    try:
        if REFERENCE_RUNS:  # uninterrupted runs with the same seed, alongside the chain
            refs = [Launch(tmp_path / f"ref{i}", CHAIN, tag="ref") for i in (1, 2)]
            launches += refs

        # 1. A checkpoint write fails (disk full): the run stops with a clear error, removes
        #    the partial checkpoint, and keeps the previous one.
        if tmpfs:  # a real full disk: 3 MB holds one checkpoint (~2.4 MB), not two
            s1 = Launch(run, CHAIN, tag="1-disk-full")
        else:  # not root: the orchestrator's half of checkpoint 4 hits ENOSPC halfway (injected)
            s1 = Launch(run, CHAIN, tag="1-disk-full", wrapper=[*INSTRUMENTED, "--enospc-at-checkpoint", "4"])
        launches.append(s1)
        assert s1.wait(300) == 1, s1.describe()
        assert s1.shutdown_report(time.time())[1] == [], "a child outlived the launcher's failure exit"
        state = checkpoint_state(run)
        assert state["complete"] == [2], state
        error = s1.stderr[s1.stderr.find("error:"):] if "error:" in s1.stderr else ""
        record("chain.disk_full.error", [x for x in error.splitlines() if "error" in x.lower()][-3:])
        if "checkpoint 4" not in error or not any(m in error for m in ("No space left", "not enough free disk")):
            problems.append(f"disk full: the launcher's error does not say that checkpoint 4 failed for lack of "
                            f"space: {error[-1500:]}")
        if state["partial"]:
            problems.append(f"disk full: the failed checkpoint left partial files behind: {state['partial']}")
        note(f"1-disk-full ({'tmpfs' if tmpfs else 'injected ENOSPC'}): rc 1, {state}")
        if tmpfs:
            remount_tmpfs(ckpt_mount, "64m")  # the operator frees space, then resumes

        # 2. Ctrl-C while checkpoint 4 is being finalized (held 2 s, as a slow fsync would).
        s2, _ = resume("2-ctrl-c-checkpoint", "checkpoint:4:2")
        s2.wait_stderr("tandem: fault hold: checkpoint 4", 240)
        stop(s2, signal.SIGINT, "ctrl_c_checkpoint")
        assert s2.proc.returncode == 130, s2.describe()
        state = checkpoint_state(run)
        # Finalize is one short synchronous step: it completes, or it never renamed. Either way
        # every step_N directory is whole, and a .tmp is discarded by the next resume.
        assert state["complete"] and state["complete"][-1] in (2, 4), state
        for n in state["complete"]:
            names = sorted(p.name for p in (run / "checkpoints" / f"step_{n:06d}").iterdir())
            assert names == ["hf", "orchestrator.json", "trainer_rank000.pt"], (n, names)
        note(f"2-ctrl-c-checkpoint: {state}")

        # 3. Ctrl-C during the weight sync to version 5 (engines serve it; the step is not recorded).
        s3, _ = resume("3-ctrl-c-sync", "sync:5:30")
        s3.wait_stderr("tandem: fault hold: sync 5", 240)
        stop(s3, signal.SIGINT, "ctrl_c_sync")
        assert s3.proc.returncode == 130, s3.describe()
        assert (run / "weights" / "step_000005").exists()  # published and loaded, never checkpointed
        note(f"3-ctrl-c-sync: {checkpoint_state(run)}")

        # 4. Ctrl-C during rollout, in async steady state: step j+1's requests are in flight
        #    while the trainer is busy with step j (frozen with SIGSTOP, standing for a long
        #    training step). Long generations in this stage only keep the requests in flight
        #    for seconds (a /v1/loads poll can take a few hundred ms on a busy box); nothing it
        #    trains is kept, as it stops before its first checkpoint.
        s4, at = resume("4-ctrl-c-rollout", args=["--rollout.sampling.max_new_tokens", "256"])
        assert not (run / "weights" / "step_000005").exists(), "resume kept weights newer than its checkpoint"
        # When row j-1 is logged the trainer idles, waiting for batch j, and the producer has
        # just launched step j+1. Freeze the trainer there (if the test was too slow and the
        # trainer already finished step j, let it go and try the next step). Steps are numbered
        # from 1, files included.
        for j in range(at + 2, CHAIN_STEPS - 1):  # leave a checkpoint for stage 5 to break
            s4.wait_until(lambda: j - 1 in {r["step"] for r in metrics(run)}, 240, f"step {j - 1} recorded",
                          poll_s=0.005)
            trainer = s4.child("tandem.trainer")
            trainer.suspend()
            if not (run / "trainer" / f"step_{j:06d}.json").exists():
                break
            trainer.resume()
        else:
            raise AssertionError("the trainer always finished its step before the test could stop it")
        s4.wait_until(lambda: (run / "rollouts" / f"step_{j:06d}.json").exists() and in_flight(run, s4.started_wall),
                      30, f"batch {j} handed to the (stopped) trainer while step {j + 1} is in flight", poll_s=0.005)
        assert not (run / "trainer" / f"step_{j:06d}.json").exists()
        stop(s4, signal.SIGINT, "ctrl_c_rollout")
        if s4.proc.returncode != 130:
            problems.append(f"ctrl-c during rollout: launcher exit code {s4.proc.returncode}, not 130")
        note(f"4-ctrl-c-rollout: step {j + 1} in flight, trainer stopped in step {j}")

        # 5. kill -9 of the launcher's whole process group while the next checkpoint is half
        #    done. Its children (each in its own session) die by PR_SET_PDEATHSIG. The .tmp
        #    then holds every part but was never renamed, so it must not be picked.
        last = checkpoint_state(run)["complete"][-1]
        s5, _ = resume("5-kill-group", f"checkpoint:{last + 2}:60",
                       args=["--rollout.sampling.max_new_tokens", "24"])
        s5.wait_stderr(f"tandem: fault hold: checkpoint {last + 2}", 240)
        stop(s5, signal.SIGKILL, "kill9_group", group=True)
        state = checkpoint_state(run)
        assert state["partial"].get(f".step_{last + 2:06d}.tmp") == ["hf", "orchestrator.json",
                                                                     "trainer_rank000.pt"], state
        note(f"5-kill-group: {state}")

        # 6. Resume to the end.
        s6, at = resume("6-finish")
        assert at == last and not checkpoint_state(run)["partial"]
        assert s6.wait(300) == 0, s6.describe()
        final_state = checkpoint_state(run)  # (read before the tmpfs goes)
        note("6-finish: done")
        for ref in refs:
            assert ref.wait(300) == 0, ref.describe()
    finally:
        for launch in launches:
            launch.kill_all()
        if tmpfs:
            umount(ckpt_mount)
    record("chain.history", history)

    # Steps 1..8 exactly once, each on PROMPTS x GROUP samples, no prompt trained twice, and the
    # same prompts as an uninterrupted run: admission stops at CHAIN_STEPS * PROMPTS groups, so
    # without stale drops the run trains exactly the cursor's first CHAIN_STEPS * PROMPTS draws,
    # whichever step each lands in (rollouts stream); a resume regenerates the checkpoint's
    # in-flight prompts, so none is lost or trained twice.
    problems += check_batches(run, CHAIN_STEPS)
    dropped = sum(r["dropped_stale"] // GROUP + r["oversample_discarded"] for r in metrics(run))
    trained = set().union(*prompt_indices(run).values())
    expected = set(cursor_draws(run, CHAIN_STEPS * PROMPTS + dropped))
    if trained != expected and not (dropped and trained <= expected):
        problems.append(f"trained prompts {sorted(trained)} != the seeded cursor's first draws {sorted(expected)}")
    assert all(prompt_indices(run)[s] == idx for s, idx in completed.items())
    assert final_state == {"complete": [6, 8], "partial": {}}, final_state
    trained = sum(len(batch(run, s)["samples"]) for s in range(1, CHAIN_STEPS + 1))
    record("chain.samples_lost", CHAIN_STEPS * PROMPTS * GROUP - trained)

    # The final weights are bitwise those of one uninterrupted trainer fed the same batches:
    # weights, optimizer state and step counter survived every crash.
    final, replayed = final_weights(run), replay_weights(run, CHAIN_STEPS)
    assert final.keys() == replayed.keys()
    differing = [k for k in final if not torch_equal(final[k], replayed[k])]
    assert not differing, f"resumed weights differ from an uninterrupted trainer on: {differing[:5]}"

    if refs:
        # Against real uninterrupted runs they cannot be bitwise equal: engine sampling is not
        # seeded per request, so the samples themselves differ run to run. Measure how far.
        base, r1, r2 = base_weights(), final_weights(tmp_path / "ref1"), final_weights(tmp_path / "ref2")
        record("chain.weights", {
            "rel_l2(chain, ref1)": rel_l2(final, r1), "rel_l2(chain, ref2)": rel_l2(final, r2),
            "rel_l2(ref2, ref1)": rel_l2(r2, r1), "l2(chain, ref1)": l2(final, r1), "l2(chain, ref2)": l2(final, r2),
            "l2(ref2, ref1)": l2(r2, r1), "l2(ref1, base)": l2(r1, base), "l2(ref2, base)": l2(r2, base),
            "l2(chain, base)": l2(final, base)})
        assert prompt_indices(tmp_path / "ref1") == prompt_indices(tmp_path / "ref2") == expected
        # What the README quotes: crashes and resumes move the final weights no farther from an
        # uninterrupted run than sampling noise moves two uninterrupted runs from each other.
        noise = rel_l2(r2, r1)
        assert max(rel_l2(final, r1), rel_l2(final, r2)) <= RESUME_NOISE_FACTOR * noise, noise

    assert not problems, "\n".join(problems)


def torch_equal(a, b) -> bool:
    import torch

    return a.shape == b.shape and bool(torch.equal(a, b))
