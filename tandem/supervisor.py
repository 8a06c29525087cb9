"""The launcher's process supervisor: it owns every child and tears the group down.

Each child gets its own log file, explicit device pinning through its environment, its
own process session (so one killpg reaches everything it spawned), and a parent-death
signal (so even `kill -9` of the launcher takes it down). Readiness is polled with a
timeout while checking the child is still alive (tandem.orchestrator.startup); nobody sleeps
and hopes. On the first
failure, on Ctrl-C/SIGTERM, or at a normal finish, `shutdown()` sends SIGTERM to every
group, waits, then SIGKILLs whatever is left.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx

PR_SET_PDEATHSIG = 1


class ChildFailed(RuntimeError):
    """A child died, or never became ready; the message carries the tail of its log."""


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: ask the kernel to SIGKILL us if the
    # launcher dies without cleaning up (kill -9, OOM killer).
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError:
        pass


def tail(path: Path, lines: int = 20) -> str:
    try:
        text = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(text[-lines:])


@dataclass
class Child:
    name: str
    cmd: list[str]
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    role: str = ""
    proc: subprocess.Popen | None = None
    critical: bool = True
    """A critical child's death stops the run (the supervisor may instead restart engines)."""
    stop_grace_s: float | None = None
    """How long it gets between SIGTERM and SIGKILL; None: the supervisor's grace."""

    @property
    def served_url(self) -> str:
        """The URL of a child that serves one (an engine, the router)."""
        if self.url is None:
            raise ValueError(f"{self.name} was started without a URL")
        return self.url

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def describe_exit(self) -> str:
        code = self.proc.returncode if self.proc else None
        how = f"signal {-code}" if code is not None and code < 0 else f"exit code {code}"
        return f"{self.name} died ({how}); last lines of {self.log_path}:\n{tail(self.log_path)}"


class Supervisor:
    def __init__(self, run_dir: Path, cwd: Path):
        self.run_dir = run_dir
        self.cwd = cwd
        self.children: dict[str, Child] = {}
        self.log_dir = run_dir / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._stopping = False

    # ---------------------------------------------------------------- start
    def start(self, name: str, cmd: list[str], *, env: dict[str, str] | None = None, url: str | None = None,
              role: str = "", critical: bool = True, stop_grace_s: float | None = None) -> Child:
        child = Child(name, cmd, self.log_dir / f"{name}.log", env or {}, url, role, critical=critical,
                      stop_grace_s=stop_grace_s)
        full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **child.env}
        log = open(child.log_path, "ab")
        log.write(f"$ {' '.join(cmd)}\n".encode())
        log.flush()
        child.proc = subprocess.Popen(
            cmd, cwd=self.cwd, env=full_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, preexec_fn=_die_with_parent,
        )
        log.close()
        with self._lock:
            self.children[name] = child
        return child

    @staticmethod
    def http_ok(url: str, timeout_s: float = 2.0) -> Callable[[], bool]:
        def probe() -> bool:
            return httpx.get(url, timeout=timeout_s).status_code == 200
        return probe

    # ---------------------------------------------------------------- liveness
    def first_dead(self) -> Child | None:
        with self._lock:
            children = list(self.children.values())
        for child in children:
            if child.critical and child.proc is not None and child.proc.poll() is not None:
                return child
        return None

    def check(self) -> None:
        dead = self.first_dead()
        if dead is not None and not self._stopping:
            raise ChildFailed(dead.describe_exit())

    # ---------------------------------------------------------------- stop
    def stop_child(self, child: Child, grace_s: float = 5.0) -> None:
        self._stop_all([child], grace_s)

    def _terminate(self, child: Child) -> None:
        # SIGCONT after SIGTERM (as systemd does): a stopped process (SIGSTOP, a debugger) only
        # acts on SIGTERM once continued; otherwise it would sit out the whole grace period.
        self._signal_group(child, signal.SIGTERM)
        self._signal_group(child, signal.SIGCONT)

    @staticmethod
    def _signal_group(child: Child, sig: int) -> None:
        if child.proc is None:
            return
        try:
            os.killpg(child.proc.pid, sig)  # the child leads its own session: this reaches its subtree
        except (ProcessLookupError, PermissionError):
            pass

    def shutdown(self, grace_s: float = 5.0) -> None:
        """SIGTERM every group, wait up to grace_s, then SIGKILL what is left. Idempotent."""
        self._stopping = True
        with self._lock:
            children = list(self.children.values())
        self._stop_all(children, grace_s)

    def _stop_all(self, children: list[Child], grace_s: float) -> None:
        """SIGTERM (+SIGCONT) every group, wait up to grace_s, SIGKILL what is left, reap."""
        for child in children:
            self._terminate(child)
        started = time.monotonic()
        waiting = list(children)
        while waiting and time.monotonic() - started < grace_s:
            for child in waiting:
                if child.stop_grace_s is not None and time.monotonic() - started >= child.stop_grace_s:
                    self._signal_group(child, signal.SIGKILL)  # its own, shorter grace is over
            waiting = [c for c in waiting if c.alive]
            time.sleep(0.05)
        late = [child.name for child in waiting if child.alive]
        if late:  # where a slow stop's time went: a child that ignores or sits on SIGTERM
            print(f"tandem: {', '.join(late)} still running {grace_s:g} s after SIGTERM: killed", file=sys.stderr,
                  flush=True)
        for child in children:
            self._signal_group(child, signal.SIGKILL)
            if child.proc is not None:
                try:
                    child.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass
