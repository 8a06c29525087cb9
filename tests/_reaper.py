"""Run one command as a child subreaper and report every descendant that outlives it.

    python tests/_reaper.py REPORT.json GRACE_S -- python train.py ...

Polling a process tree misses whatever is born and orphaned between two polls. A child
subreaper (prctl PR_SET_CHILD_SUBREAPER) does not: every descendant of the command whose
parent dies is re-parented to this process instead of to init, so when the command exits,
this process's children are exactly the command's surviving descendants, however briefly
they lived. They get GRACE_S to go on their own (a parent-death signal, a SIGTERM already in
flight); whatever is still running then is an orphan, is reported, and is killed so that no
test leaks it.

The command runs in its own session (so `os.killpg(pid)` is "kill the launcher's whole
group" without hitting this process); its pid is the first line of REPORT.json.pid, and
SIGINT / SIGTERM sent to this process are forwarded to it. The exit status is the command's
(a signal death as 128 + signal). REPORT.json holds:
    {"pid", "rc", "exited_at", "last_gone_at", "orphans": [{"pid", "cmdline"}]}
with wall-clock times (time.time()), so a test can time "signal sent -> every descendant gone".
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def descendants() -> list[int]:
    """Live (non-zombie) processes whose parent chain leads here, read from /proc."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            parents[int(entry)] = int(fields[1])
    me, found = os.getpid(), []
    for pid in parents:
        p, hops = pid, 0
        while p in parents and p != me and hops < 64:
            p, hops = parents[p], hops + 1
        if p == me and pid != me:
            found.append(pid)
    return found


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def reap_zombies() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    report_path, grace_s, command = argv[0], float(argv[1]), argv[3:]
    assert argv[2] == "--", "usage: _reaper.py REPORT.json GRACE_S -- COMMAND..."
    if ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1) != 0:
        sys.exit(f"prctl(PR_SET_CHILD_SUBREAPER) failed: {os.strerror(ctypes.get_errno())}")
    started: list[subprocess.Popen] = []
    # Forwarding handlers go in before the child starts. A Python-level handler is reset to the
    # default at exec, whereas an ignored SIGINT (a suite started from a script's background job or
    # nohup) would be inherited, and the Ctrl-C tests would test that job, not the launcher.
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda signum, frame: [c.send_signal(signum) for c in started])
    child = subprocess.Popen(command, start_new_session=True)
    started.append(child)
    with open(report_path + ".pid", "w") as f:
        f.write(f"{child.pid}\n")
    rc = child.wait()
    exited_at = time.time()
    deadline = time.monotonic() + grace_s
    while (left := descendants()) and time.monotonic() < deadline:
        reap_zombies()
        time.sleep(0.01)
    last_gone_at = time.time()
    orphans = [{"pid": pid, "cmdline": cmdline(pid)} for pid in left]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    reap_zombies()
    with open(report_path, "w") as f:
        json.dump({"pid": child.pid, "rc": rc, "exited_at": exited_at, "last_gone_at": last_gone_at,
                   "orphans": orphans}, f)
    return rc if rc >= 0 else 128 - rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))


# --------------------------------------------------------------------------- for tests
REAPER = os.path.abspath(__file__)


def reaped(command: list[str], report_path: str, grace_s: float) -> list[str]:
    """`command` run under this reaper (see the module docstring)."""
    return [sys.executable, REAPER, str(report_path), str(grace_s), "--", *command]


def launched_pid(report_path: str, reaper: subprocess.Popen, timeout_s: float = 30.0) -> int:
    """The command's pid, once the reaper has started it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(str(report_path) + ".pid") as f:
                text = f.read()
            if text.endswith("\n"):
                return int(text)
        except FileNotFoundError:
            pass
        if reaper.poll() is not None:
            raise RuntimeError(f"the reaper exited ({reaper.returncode}) before starting its command")
        time.sleep(0.01)
    raise RuntimeError(f"the reaper did not start its command within {timeout_s:.0f}s")


def read_report(report_path: str) -> dict:
    with open(report_path) as f:
        return json.load(f)
