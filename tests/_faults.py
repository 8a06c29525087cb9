"""Helpers for the fault-injection tests (tests/test_faults.py).

They drive the real launcher (`python train.py` in its own session, so `os.killpg` reaches
it), watch every process it spawns (psutil, sampled in a background thread, so a child that
was restarted or already died is still known), inject faults (kill -9, SIGSTOP, SIGINT),
and read what the run left on disk (metrics.jsonl, rollouts/step_N.json, weights).

`parity_reward` is the reward plug-in these runs use instead of the echo task's: a tiny
random model never writes the echo label, so the echo reward is always 0, advantages are
0 and the weights would never move, which would make "the final weights match" vacuous.
The share of even token ids varies inside every group, so every step has a gradient.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from tandem.orchestrator.hooks import RunHooks

REPO = Path(__file__).resolve().parents[1]
FAULTS_FILE = "tests/_faults.py"
INSTRUMENTED = ["-m", "tests._faults"]
"""The launcher with a test's hooks (`instrumented_main`), in place of train.py."""
MARGIN_S = 15.0
"""What a loaded 2-core CI box may add to a check, a probe or a shutdown; time bounds add it once. Generous
on purpose: each bound tells "done by the mechanism" (a check, SIGKILL after the grace) from "never"."""
ORPHAN_GRACE_S = 2.0
"""How long a descendant may outlive the launcher (a parent-death SIGKILL being delivered) before it counts as an orphan."""
PROMPTS, GROUP = 2, 4
SMALL = ["--rollout.prompts_per_step", str(PROMPTS), "--rollout.samples_per_prompt", str(GROUP),
         "--logging.tensorboard", "false", "--logging.live", "off", "--engine.startup_timeout_s", "150",
         "--rollout.reward", f"{FAULTS_FILE}:parity_reward", "--run.keep_rollouts", "all"]


def children_gone_bound_s() -> float:
    """Signal to the launcher -> its last child gone: the launcher SIGTERMs every child and SIGKILLs
    what is left after Supervisor.shutdown's grace period; a loaded box adds MARGIN_S."""
    import inspect

    from tandem.supervisor import Supervisor

    return inspect.signature(Supervisor.shutdown).parameters["grace_s"].default + MARGIN_S


def parity_reward(sample, row) -> float:
    """Share of even token ids in the response (see the module docstring for why)."""
    ids = sample.response_ids
    return sum(1 for t in ids if t % 2 == 0) / max(1, len(ids))


# --------------------------------------------------------------------------- the launcher
class Launch:
    """One `python train.py ...` process, with its output in files and its descendants tracked."""

    def __init__(self, run_dir: Path, args: list[str], *, resume: bool = False, env: dict[str, str] | None = None,
                 wrapper: list[str] | None = None, tag: str = "launch", terminal: bool = False):
        """terminal: the launcher's stdout is a pseudo-terminal (what a user at a shell sees)."""
        import psutil

        from _reaper import launched_pid, reaped  # here: the launcher loads this file as a reward plug-in

        self.run_dir = Path(run_dir)
        logs = self.run_dir.parent / f"{self.run_dir.name}-launcher-logs"
        logs.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = logs / f"{tag}.out", logs / f"{tag}.err"
        target = ["--resume", str(self.run_dir)] if resume else ["--run-dir", str(self.run_dir)]
        entry = wrapper or ["train.py"]
        # Under a child subreaper (tests/_reaper.py), which starts the launcher in its own
        # session: os.killpg(self.pid) is "kill the whole launcher group", and every
        # descendant that outlives the launcher is caught, not only those a poll happened to see.
        self.report_path = logs / f"{tag}.reaper.json"
        for stale in (self.report_path, Path(f"{self.report_path}.pid")):
            stale.unlink(missing_ok=True)
        stdout = _terminal_into(self.out_path) if terminal else open(self.out_path, "w")
        self.proc = subprocess.Popen(
            reaped([sys.executable, *entry, *target, *args], str(self.report_path), ORPHAN_GRACE_S), cwd=REPO,
            env={**os.environ, **(env or {})}, stdout=stdout, stderr=open(self.err_path, "w"),
            stdin=subprocess.DEVNULL, start_new_session=True)
        stdout.close()
        self.pid = launched_pid(str(self.report_path), self.proc)
        """The launcher's pid (self.proc is the reaper around it; its exit status is the launcher's)."""
        self.started = time.monotonic()
        self.started_wall = time.time()
        self.seen: dict[int, psutil.Process] = {}
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        import psutil

        while not self._stop.is_set():
            try:
                for p in psutil.Process(self.pid).children(recursive=True):
                    self.seen.setdefault(p.pid, p)
            except psutil.NoSuchProcess:
                return
            time.sleep(0.2)

    # ------------------------------------------------------------------ looking
    @property
    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    @property
    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def describe(self) -> str:
        return (f"launcher rc={self.proc.poll()}\n--- stderr (tail)\n{self.stderr[-4000:]}\n"
                f"--- stdout (tail)\n{self.stdout[-1500:]}")

    def wait_until(self, predicate: Callable[[], object], timeout_s: float, what: str, poll_s: float = 0.02):
        """Poll until `predicate()` is truthy; fail with the launcher's output if it exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = predicate()
            if value:
                return value
            if self.proc.poll() is not None:
                value = predicate()
                if value:
                    return value
                raise AssertionError(f"launcher exited while waiting for {what}\n{self.describe()}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}\n{self.describe()}")
            time.sleep(poll_s)

    def wait_stderr(self, text: str, timeout_s: float, start: int = 0) -> int:
        """Wait for `text` in stderr at or after offset `start`; returns the offset just past it."""
        def found():
            i = self.stderr.find(text, start)
            return i + len(text) if i >= 0 else 0
        return self.wait_until(found, timeout_s, f"'{text}' in the launcher's stderr", poll_s=0.05)

    def engine(self, name: str):
        """The live engine process started with `--name <name>` (the current incarnation)."""
        import psutil

        def current():
            for p in list(self.seen.values()):
                try:
                    cmd = p.cmdline()
                    if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and "tandem.engine" in cmd \
                            and cmd[cmd.index("--name") + 1] == name:
                        return p
                except (psutil.Error, ValueError, IndexError):
                    continue
            return None
        return self.wait_until(current, 30, f"engine process {name}")

    def child(self, module: str):
        import psutil

        for p in list(self.seen.values()):
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE and module in p.cmdline():
                    return p
            except psutil.Error:
                continue
        raise AssertionError(f"no live child running {module}")

    def wait(self, timeout_s: float) -> int:
        try:
            rc = self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.kill_all()
            raise AssertionError(f"launcher did not exit within {timeout_s:.0f}s\n{self.describe()}")
        finally:
            self._stop.set()
        return rc

    def os_kill(self, sig: int) -> None:
        """Signal the launcher itself (not the reaper around it)."""
        os.kill(self.pid, sig)

    def shutdown_report(self, signalled_at: float) -> tuple[float, list[dict]]:
        """After the launcher exited: seconds from `signalled_at` (time.time()) until its last
        descendant was gone, and the descendants that outlived it by ORPHAN_GRACE_S (killed since)."""
        from _reaper import read_report

        report = read_report(str(self.report_path))
        return report["last_gone_at"] - signalled_at, report["orphans"]

    def kill_all(self) -> None:
        """Clean-up for a failed test: nothing of ours may outlive it."""
        self._stop.set()
        procs = list(self.seen.values())
        for group in (self.pid, self.proc.pid):
            try:
                os.killpg(group, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.kill()
            except Exception:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


def _terminal_into(path: Path):
    """The slave end of a 120x40 pseudo-terminal; a thread copies what is written to it into `path`
    (and keeps draining it, so the writer never blocks on a full terminal buffer)."""
    import fcntl
    import pty
    import struct
    import termios

    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))

    def copy() -> None:
        with open(path, "wb") as out:
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:  # EIO: every writer has closed the terminal
                    break
                if not chunk:
                    break
                out.write(chunk)
                out.flush()
        os.close(master)

    threading.Thread(target=copy, daemon=True).start()
    return os.fdopen(slave, "wb")


def survivors(procs, within_s: float) -> list:
    """Processes among `procs` still running (not zombies) after waiting up to within_s."""
    import psutil

    deadline = time.monotonic() + within_s
    alive = list(procs)
    while True:
        alive = [p for p in alive if _running(p, psutil)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def _running(p, psutil) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


# --------------------------------------------------------------------------- the run directory
def metrics(run_dir: Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def rows_done(run_dir: Path) -> int:
    return len(metrics(run_dir))


def batch(run_dir: Path, step: int) -> dict:
    """The batch step `step` trained on (steps are numbered from 1, as metrics rows and files are)."""
    return json.loads((Path(run_dir) / "rollouts" / f"step_{step:06d}.json").read_text())


def batch_steps(run_dir: Path) -> list[int]:
    return sorted(int(p.stem.split("_")[1]) for p in (Path(run_dir) / "rollouts").glob("step_*.json"))


def prompt_indices(run_dir: Path) -> dict[int, set[int]]:
    """step -> the dataset rows its batch trained on."""
    return {s: {d["prompt_index"] for d in batch(run_dir, s)["samples"]} for s in batch_steps(run_dir)}


def check_batches(run_dir: Path, steps: int) -> list[str]:
    """Every step trained on exactly PROMPTS groups of GROUP samples; no sample lost or counted twice."""
    problems = []
    rows = metrics(run_dir)
    if [r["step"] for r in rows] != list(range(1, steps + 1)):
        problems.append(f"metrics steps {[r['step'] for r in rows]} != 1..{steps}")
    for r in rows:
        if r["samples"] != PROMPTS * GROUP:
            problems.append(f"step {r['step']}: metrics samples {r['samples']} != {PROMPTS * GROUP}")
        if r["dropped_stale"] % GROUP:  # streaming may drop a group that missed its steps, never part of one
            problems.append(f"step {r['step']}: {r['dropped_stale']} samples dropped as stale: not whole groups")
    if batch_steps(run_dir) != list(range(1, steps + 1)):
        problems.append(f"rollouts/ has steps {batch_steps(run_dir)}")
    for step in batch_steps(run_dir):
        samples = batch(run_dir, step)["samples"]
        groups: dict[int, list[dict]] = {}
        for s in samples:
            groups.setdefault(s["group_id"], []).append(s)
            if not s["response_ids"] or len(s["response_ids"]) != len(s["rollout_logprobs"]):
                problems.append(f"step {step}: a sample without aligned response tokens/logprobs")
        sizes = sorted(len(g) for g in groups.values())
        if len(samples) != PROMPTS * GROUP or sizes != [GROUP] * PROMPTS:
            problems.append(f"step {step}: {len(samples)} samples in groups of {sizes}")
        if any(len({s['prompt_index'] for s in g}) != 1 for g in groups.values()):
            problems.append(f"step {step}: a group mixes prompts")
    seen: dict[int, int] = {}
    for step, idx in prompt_indices(run_dir).items():
        for i in idx:
            if i in seen:
                problems.append(f"prompt {i} trained in step {seen[i]} and again in step {step}")
            seen[i] = step
    return problems


def final_weights(run_dir: Path) -> dict:
    """The last published weight version's tensors (float64 for distances)."""
    from safetensors.torch import load_file

    from tandem.weights import published_versions, version_dir

    v = published_versions(run_dir)[-1]
    tensors: dict = {}
    for f in sorted(version_dir(run_dir, v).glob("*.safetensors")):
        tensors.update({k: t.double() for k, t in load_file(str(f)).items()})
    return tensors


def base_weights() -> dict:
    """Weight version 0: the tiny model every run starts from (same cache dir as the launcher's)."""
    from safetensors.torch import load_file

    from tandem.config import load_config
    from tandem.model_source import resolve_model_path

    cfg = load_config([])
    cfg.run.cache_dir = str((REPO / cfg.run.cache_dir).resolve()) if not Path(cfg.run.cache_dir).is_absolute() \
        else cfg.run.cache_dir
    path = Path(resolve_model_path(cfg))
    tensors: dict = {}
    for f in sorted(path.glob("*.safetensors")):
        tensors.update({k: t.double() for k, t in load_file(str(f)).items()})
    return tensors


def rel_l2(a: dict, b: dict) -> float:
    """||a - b|| / ||b|| over every tensor together."""
    import torch

    assert a.keys() == b.keys(), (sorted(a) , sorted(b))
    num = sum(float(torch.sum((a[k] - b[k]) ** 2)) for k in a)
    den = sum(float(torch.sum(b[k] ** 2)) for k in b)
    return (num / den) ** 0.5


def l2(a: dict, b: dict) -> float:
    import torch

    return sum(float(torch.sum((a[k] - b[k]) ** 2)) for k in a) ** 0.5


def record(name: str, value) -> None:
    """Figures the report quotes: printed (pytest -s) and appended to $TANDEM_FAULT_FIGURES if set."""
    print(f"FIGURE {name} = {json.dumps(value)}", flush=True)
    out = os.environ.get("TANDEM_FAULT_FIGURES")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"name": name, "value": value}) + "\n")


# --------------------------------------------------------------------------- exact references
def cursor_draws(run_dir: Path, n: int) -> list[int]:
    """The first n prompts the seeded data cursor draws (dataset `_index`), in order."""
    from tandem.rollout import PromptCursor, load_dataset_rows
    from tandem.config import config_from_json

    cfg = config_from_json(str(Path(run_dir) / "config.json"))
    rows = load_dataset_rows(cfg.data.path, cfg.data.prompt_key).rows
    cursor = PromptCursor(len(rows), cfg.run.seed, cfg.data.shuffle)
    return [int(rows[cursor.next()]["_index"]) for _ in range(n)]


def admissions_bound(run_dir: Path, steps: int) -> int:
    """The most groups a run of `steps` steps can have admitted: admission stops at
    steps * B + slack (producer.py), and every group dropped as stale or cancelled at a take
    frees one more admission."""
    import math

    from tandem.config import config_from_json

    cfg = config_from_json(str(Path(run_dir) / "config.json"))
    b = cfg.rollout.prompts_per_step
    rows = metrics(run_dir)
    lost = sum(r["dropped_stale"] // cfg.rollout.samples_per_prompt + r["oversample_discarded"] for r in rows)
    return steps * b + math.ceil(b * cfg.rollout.oversample) - b + lost


def replay_weights(run_dir: Path, steps: int) -> dict:
    """Train a fresh trainer, in this process, on the batches the run left in rollouts/ and
    return its final weights: what an uninterrupted trainer makes of exactly those samples.

    After any number of crashes and resumes, rollouts/ holds precisely the batches the final
    weights were trained on (a resume deletes the batches after its checkpoint), so a correct
    checkpoint/resume (weights, optimizer state, step counter) gives bitwise the same weights.
    """
    import torch

    from tandem import handoff
    from tandem.config import config_from_json
    from tandem.placement import plan_placement
    from tandem.trainer.torch_backend import TorchTrainer

    cfg = config_from_json(str(Path(run_dir) / "config.json"))
    cfg.trainer.device = "cpu"
    threads = torch.get_num_threads()
    torch.set_num_threads(plan_placement(cfg, 0).cpu_threads)  # the trainer child's thread count
    try:
        trainer = TorchTrainer(cfg)
        for step in range(steps):
            trainer.train_step(handoff.wait_batch(run_dir, step, timeout_s=1).samples)
        return {k: v.double() for k, v in trainer.export_hf_state_dict().items()}
    finally:
        torch.set_num_threads(threads)


# --------------------------------------------------------------------------- checkpoints on disk
def checkpoint_state(run_dir: Path) -> dict:
    """What is under checkpoints/: complete step dirs, and partial .tmp dirs with their contents."""
    root = Path(run_dir) / "checkpoints"
    out = {"complete": [], "partial": {}}
    for p in sorted(root.iterdir()) if root.exists() else []:
        if p.name.startswith("step_"):
            out["complete"].append(int(p.name[5:]))
        elif p.name.startswith(".step_") and p.name.endswith(".tmp"):
            out["partial"][p.name] = sorted(q.name for q in p.iterdir())
    return out


def mount_tmpfs(path: Path, size: str) -> bool:
    """A small tmpfs at `path` (a disk that fills up), when this process may mount one (root)."""
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tandem-test-full", str(path)],
                       capture_output=True, text=True)
    return r.returncode == 0


def remount_tmpfs(path: Path, size: str) -> None:
    subprocess.run(["mount", "-o", f"remount,size={size}", str(path)], check=True, capture_output=True)


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


# --------------------------------------------------------------------------- an instrumented launcher
class FaultHold(RunHooks):
    """Hold the launcher at PHASE of N (tandem/orchestrator/hooks.py) for S seconds, announced on
    stderr, so a test can interrupt it exactly there."""

    def __init__(self, spec: str):
        phase, n, seconds = (spec.split(":") + ["30"])[:3]
        self.phase, self.n, self.seconds = phase, int(n), float(seconds)

    def _hit(self, phase: str, n: int) -> bool:
        if (phase, n) != (self.phase, self.n):
            return False
        print(f"tandem: fault hold: {phase} {n} for {self.seconds:g}s", file=sys.stderr, flush=True)
        return True

    def at(self, phase: str, n: int) -> None:
        if self._hit(phase, n):
            time.sleep(self.seconds)

    async def at_async(self, phase: str, n: int) -> None:
        if self._hit(phase, n):
            await asyncio.sleep(self.seconds)


def full_disk_at_checkpoint(step: int) -> None:
    """The checkpoint's fsync fails on `step` as on a full disk: half of orchestrator.json is on
    disk, then ENOSPC. Used where no tmpfs can be mounted (not root), so the orchestrator's half
    of a checkpoint write fails instead."""
    import errno

    from tandem import checkpoint

    real_fsync = checkpoint._fsync_tree

    def full_disk(path: Path) -> None:
        if Path(path).name == f".step_{step:06d}.tmp":
            part = Path(path) / "orchestrator.json"
            part.write_bytes(part.read_bytes()[: part.stat().st_size // 2])
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(part))
        real_fsync(path)

    checkpoint._fsync_tree = full_disk


def instrumented_main(argv: list[str]) -> int:
    """The real launcher, with `--hold PHASE:N[:S]` (a FaultHold) and `--enospc-at-checkpoint N`
    taken off the front of its arguments."""
    from tandem.orchestrator.launcher import main

    hooks = RunHooks()
    while argv[:1] in (["--hold"], ["--enospc-at-checkpoint"]):
        if argv[0] == "--hold":
            hooks = FaultHold(argv[1])
        else:
            full_disk_at_checkpoint(int(argv[1]))
        argv = argv[2:]
    return main(argv, hooks=hooks)


if __name__ == "__main__":
    # python -m tests._faults [--hold PHASE:N[:S]] [--enospc-at-checkpoint N] <train.py arguments>
    sys.exit(instrumented_main(sys.argv[1:]))
