"""Helpers the bench scripts share (imported as `_common`: each script's own directory is on its path).

- `proc_stat`, `tree_cpu_seconds`: CPU seconds from /proc, of one process (engine_throughput.py's
  server) or of tandem's whole process tree by role (trl_compare.py), for CPU-per-step figures.
- `median_or_none`: the median of the measured steps, None where a run produced none, for
  trl_compare.py and the TRL worker it starts (trl_worker.py).
- `start_s3`: a real S3 API on 127.0.0.1 (moto's server in a subprocess), for sync_transport.py
  and the tests of weights through an object store (imported there as `bench._common`).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
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


S3_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
"""moto's test credentials, put in this process's environment for its own clients and its children."""


@dataclass
class S3Server:
    endpoint: str
    proc: subprocess.Popen

    @property
    def storage_options(self) -> dict:
        return {"endpoint_url": self.endpoint}

    def filesystem(self):
        import s3fs

        return s3fs.S3FileSystem(endpoint_url=self.endpoint, key="testing", secret="testing")

    def make_bucket(self, name: str) -> str:
        self.filesystem().mkdir(name)
        return f"s3://{name}"

    def stop(self) -> None:
        """Kill it outright: an in-memory store has nothing to flush."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


def start_s3(log_path: Path, timeout_s: float = 60.0) -> S3Server:
    import httpx

    from tandem.ports import free_port

    os.environ.update(S3_ENV)
    port = free_port()
    with open(log_path, "w") as log:
        proc = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    server = S3Server(f"http://127.0.0.1:{port}", proc)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            httpx.get(f"{server.endpoint}/moto-api/", timeout=1.0)
            return server
        except httpx.HTTPError:
            time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"moto's S3 server did not come up on {server.endpoint}; see {log_path}")
