"""Helpers the bench scripts share (imported as `_common`: each script's own directory is on its path).

- `proc_stat`, `tree_cpu_seconds`: CPU seconds from /proc, of one process (engine_throughput.py's
  server) or of tandem's whole process tree by role (trl_compare.py), for CPU-per-step figures.
- `median_or_none`: the median of the measured steps, None where a run produced none, for
  trl_compare.py and the TRL worker it starts (trl_worker.py).
"""

from __future__ import annotations

import os
import statistics
from pathlib import Path


def proc_stat(pid: int) -> tuple[int, float]:
    """(parent pid, user + system CPU seconds of all its threads) from /proc/<pid>/stat (Linux)."""
    with open(f"/proc/{pid}/stat", "rb") as f:
        # after comm's ')' (comm may itself hold ')'): state, ppid, ..., utime and stime are the 12th and 13th fields
        fields = f.read().rsplit(b")", 1)[1].split()
    return int(fields[1]), (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _role(pid: int, root_pid: int) -> str:
    """Which part of tandem a process is, from its command line."""
    if pid == root_pid:
        return "orchestrator"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "other"
    # sglang-router renames its process to "sglang::router".
    for needle, role in (("tandem.engine", "engines"), ("sglang", "router"), ("tandem.trainer", "trainer")):
        if needle in cmd:
            return role
    return "other"


def tree_cpu_seconds(root_pid: int) -> dict[str, float] | None:
    """user+system CPU seconds of a process and its live descendants by role, from /proc (Linux).

    Each process's threads are included; children that already exited are not (tandem's
    children live for the whole run, so the steady-state steps are fully covered).
    """
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    try:
        pids = [int(d) for d in os.listdir("/proc") if d.isdigit()]
    except OSError:
        return None
    for pid in pids:
        try:
            parent[pid], cpu[pid] = proc_stat(pid)
        except (OSError, IndexError):
            continue
    if root_pid not in cpu:
        return None
    children: dict[int, list[int]] = {}
    for pid, ppid in parent.items():
        children.setdefault(ppid, []).append(pid)
    by_role: dict[str, float] = {}
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        role = _role(pid, root_pid)
        by_role[role] = by_role.get(role, 0.0) + cpu.get(pid, 0.0)
        stack.extend(children.get(pid, []))
    return by_role


def median_or_none(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def tail_text(text: str | bytes | None, n: int = 40) -> str:
    """The last n lines of a child's output, bytes or str."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    return "\n".join((text or "").splitlines()[-n:])
