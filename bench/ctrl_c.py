"""How long Ctrl-C takes, and where the time goes: the launcher on a terminal, stopped mid-run.

    python bench/ctrl_c.py                               # 3 trials of the default job, after step 2
    python bench/ctrl_c.py --trials 5 --after-steps 1 --out bench/results/ctrl_c.json -- --engines 1

Each trial starts `python train.py --steps 1000 --run-dir TMP [ARGS after --]` with its stdout on a
pseudo-terminal (the live view on, as at a shell), waits for --after-steps rows of metrics.jsonl, and
sends SIGINT to the launcher alone (what a terminal's Ctrl-C reaches: the children lead their own
sessions). Then, polling every 20 ms, it records when each process of the launcher's tree (named by its
command line) is gone, and when the launcher printed each of its lines on stderr. Every --dump-every
seconds after the SIGINT, until it exits, the launcher dumps all of its threads' stacks (faulthandler on
SIGUSR1, installed by a wrapper around train.py) into the trial's stacks file: what it waits on.

Recorded per trial: launcher_exit_s (SIGINT to the launcher's exit: the prompt back), last_child_gone_s,
each child's gone_s, the stderr lines with their times, the load average; the stacks file's path.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parent.parent
WRAPPER = """
import faulthandler, runpy, signal, sys
faulthandler.register(signal.SIGUSR1, file=open(sys.argv.pop(1), "w"), all_threads=True, chain=False)
sys.argv = ["train.py"] + sys.argv[1:]
runpy.run_path("train.py", run_name="__main__")
"""


def role(proc: psutil.Process) -> str:
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return "?"
    for i, part in enumerate(cmd):
        if part == "-m" and i + 1 < len(cmd):
            name = next((cmd[j + 1] for j in range(i, len(cmd) - 1) if cmd[j] == "--name"), "")
            return f"{cmd[i + 1]} {name}".strip()
    return " ".join(os.path.basename(c) for c in cmd[:2])


def rows(run_dir: Path) -> int:
    metrics = run_dir / "metrics.jsonl"
    return sum(1 for line in metrics.read_text().splitlines() if line.strip()) if metrics.exists() else 0


def drain(fd: int) -> None:
    """Read the terminal's output (the live view) until the launcher is gone, so it never blocks on it."""
    try:
        while os.read(fd, 65536):
            pass
    except OSError:  # EIO: the other side closed
        pass


def one_trial(args: list[str], after_steps: int, dump_every_s: float, work: Path, trial: int) -> dict:
    run_dir, stacks = work / f"run{trial}", work / f"stacks{trial}.txt"
    (work / "wrapper.py").write_text(WRAPPER)
    master, slave = pty.openpty()
    cmd = [sys.executable, str(work / "wrapper.py"), str(stacks), "--steps", "1000", "--run-dir", str(run_dir), *args]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=slave, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO)}, text=True)
    os.close(slave)
    threading.Thread(target=drain, args=(master,), daemon=True).start()
    lines: list[tuple[float, str]] = []
    threading.Thread(target=lambda: [lines.append((time.time(), line.rstrip())) for line in proc.stderr],
                     daemon=True).start()
    deadline = time.monotonic() + 900
    while rows(run_dir) < after_steps and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    if proc.poll() is not None:
        return {"error": f"the launcher exited ({proc.returncode}) before step {after_steps}", "stderr": lines[-5:]}
    tree = {p.pid: role(p) for p in psutil.Process(proc.pid).children(recursive=True)}
    load, sent = os.getloadavg()[0], time.time()
    proc.send_signal(signal.SIGINT)
    gone: dict[int, float] = {}
    next_dump = sent + dump_every_s
    while (proc.poll() is None or len(gone) < len(tree)) and time.time() - sent < 120:
        for pid in tree:
            if pid not in gone and not psutil.pid_exists(pid) or (pid not in gone and psutil.Process(pid).status()
                                                                  == psutil.STATUS_ZOMBIE):
                gone[pid] = time.time() - sent
        if proc.poll() is None and time.time() >= next_dump:
            proc.send_signal(signal.SIGUSR1)
            next_dump += dump_every_s
        time.sleep(0.02)
    exited = time.time() - sent
    proc.wait(timeout=60)
    return {"rc": proc.returncode, "load_1min": round(load, 2), "launcher_exit_s": round(exited, 2),
            "last_child_gone_s": round(max(gone.values(), default=0.0), 2),
            "children": sorted(((tree[p], round(s, 2)) for p, s in gone.items()), key=lambda x: x[1]),
            "stderr_after_sigint": [(round(t - sent, 2), text) for t, text in lines if t >= sent],
            "stacks": str(stacks)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--after-steps", type=int, default=2)
    parser.add_argument("--dump-every", type=float, default=1.0)
    parser.add_argument("--out", type=Path)
    parser.add_argument("args", nargs="*", help="after --: more train.py arguments")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tandem_ctrl_c_", dir=REPO / "runs" if (REPO / "runs").exists() else None))
    trials = []
    for trial in range(opts.trials):
        result = one_trial(opts.args, opts.after_steps, opts.dump_every, work, trial)
        trials.append(result)
        print(json.dumps(result, indent=1), flush=True)
    done = [t for t in trials if "launcher_exit_s" in t]
    print("launcher exit after SIGINT (s):", [t["launcher_exit_s"] for t in done])
    print("last child gone after SIGINT (s):", [t["last_child_gone_s"] for t in done])
    if opts.out:
        opts.out.write_text(json.dumps({"args": opts.args, "trials": trials}, indent=1) + "\n")


if __name__ == "__main__":
    main()
