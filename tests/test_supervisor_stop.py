"""The supervisor's stop: SIGTERM, then SIGKILL after the grace, each child named when it had to be killed;
a child with its own shorter grace (the router: tandem/orchestrator/cluster.py) is killed at that grace."""

from __future__ import annotations

import sys
import time

from tandem.supervisor import Supervisor

DEAF = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(600)"]


def started(sup: Supervisor, name: str) -> None:
    deadline = time.monotonic() + 120
    while "ready" not in (sup.log_dir / f"{name}.log").read_text().splitlines()[1:] and time.monotonic() < deadline:
        time.sleep(0.1)


def test_a_child_deaf_to_sigterm_is_killed_at_its_own_grace_and_others_named(tmp_path, capsys):
    sup = Supervisor(tmp_path, tmp_path)
    sup.start("short", DEAF, stop_grace_s=0.5)
    started(sup, "short")
    began = time.monotonic()
    sup.shutdown(grace_s=60.0)
    # Killed at its 0.5 s, not at the supervisor's 60 s (the bound only tells one from the other under load).
    assert time.monotonic() - began < 30, time.monotonic() - began
    assert "killed" not in capsys.readouterr().err  # its short grace is by design: nothing to report
    sup = Supervisor(tmp_path / "b", tmp_path)
    sup.start("deaf", DEAF)
    started(sup, "deaf")
    sup.shutdown(grace_s=1.0)
    assert "tandem: deaf still running 1 s after SIGTERM: killed" in capsys.readouterr().err
