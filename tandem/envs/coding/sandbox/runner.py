"""Run one sandbox argv with bounded time and output, and die with tandem.

The command's stdout and stderr are read as they come (head and tail kept, the middle
counted), a report pipe can ride along (the grader's out-of-band channel), and the
whole process group is killed at the timeout or when the interpreter exits.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (registers its thread-join exit hook before ours)
import os
import selectors
import signal
import subprocess
import threading
import time
from dataclasses import dataclass

HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

SHUTTING_DOWN = threading.Event()
"""Set when the interpreter exits: running commands are killed at once instead of holding up exit."""
# Python joins executor threads before atexit handlers run; threading's own exit hooks run
# before that join (newest first; concurrent.futures.thread, imported above, registered its
# join hook already), so commands blocking a worker thread die immediately.
_register = getattr(threading, "_register_atexit", None)
(_register or atexit.register)(SHUTTING_DOWN.set)


@dataclass
class ExecResult:
    output: str
    """stdout and stderr interleaved, as the command wrote them (middle dropped past the byte cap)."""
    returncode: int
    timed_out: bool
    duration_s: float
    output_bytes: int
    """Bytes the command wrote in total, including any that were dropped."""
    side: bytes = b""
    """What the command wrote to its report pipe (run_bounded's side_channel), if it had one."""


def run_bounded(argv: list[str], timeout_s: float, max_output_bytes: int,
                side_channel: tuple[int, int] | None = None, max_side_bytes: int = 4_000_000,
                give_fds: tuple[int, ...] = ()) -> ExecResult:
    """Run argv with stdout+stderr merged; kill its process group at the timeout.

    Output is read as it comes and only the first and last max_output_bytes/2 are kept,
    so a command that prints gigabytes costs no memory. `setpriv --pdeathsig` makes the
    wrapper die with this process, and the wrapper takes the namespace down with it.

    side_channel is a pipe (read fd, write fd): the write end is inherited by the command
    (under the same number) and closed here; what arrives on the read end, up to
    max_side_bytes, comes back as ExecResult.side. Both read ends are closed on return.
    give_fds are inherited by the command as they are and closed here once it started.
    """
    start = time.monotonic()
    handed = ((side_channel[1],) if side_channel else ()) + tuple(give_fds)
    try:
        proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                                env={"PATH": HOST_PATH, "LANG": "C.UTF-8"}, pass_fds=handed)
    finally:
        for fd in handed:
            os.close(fd)
    out, side, timed_out = _Capture(max_output_bytes), bytearray(), False
    sel = selectors.DefaultSelector()
    stdout = proc.stdout
    assert stdout is not None  # stdout=PIPE
    sel.register(stdout.fileno(), selectors.EVENT_READ, "out")
    if side_channel:
        sel.register(side_channel[0], selectors.EVENT_READ, "side")
    try:
        while sel.get_map():
            remaining = timeout_s - (time.monotonic() - start)
            if remaining <= 0 or SHUTTING_DOWN.is_set():
                timed_out = True
                break
            for key, _ in sel.select(timeout=min(remaining, 0.5)):
                chunk = os.read(key.fd, 65536)
                if not chunk:
                    sel.unregister(key.fd)
                elif key.data == "out":
                    out.add(chunk)
                elif len(side) < max_side_bytes:
                    side += chunk[: max_side_bytes - len(side)]
        while not timed_out:  # output closed; the command may still be running without it
            try:
                proc.wait(timeout=max(0.0, min(0.5, timeout_s - (time.monotonic() - start))))
                break
            except subprocess.TimeoutExpired:
                timed_out = time.monotonic() - start >= timeout_s or SHUTTING_DOWN.is_set()
    finally:
        sel.close()
        if timed_out or proc.poll() is None:
            _kill_group(proc)
        stdout.close()
        if side_channel:
            os.close(side_channel[0])
        returncode = proc.wait()
    return ExecResult(out.text(), -9 if timed_out else returncode, timed_out, time.monotonic() - start, out.total,
                      bytes(side))


class _Capture:
    """The head and tail of a stream, max_bytes in all; the middle is counted, not kept."""

    def __init__(self, max_bytes: int):
        self.half = max(1, max_bytes // 2)
        self.head, self.tail = bytearray(), bytearray()
        self.total = 0

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        if len(self.head) < self.half:
            take = self.half - len(self.head)
            self.head += chunk[:take]
            chunk = chunk[take:]
        if chunk:
            self.tail += chunk
            if len(self.tail) > self.half:
                del self.tail[: len(self.tail) - self.half]

    def text(self) -> str:
        dropped = self.total - len(self.head) - len(self.tail)
        text = self.head.decode("utf-8", "replace")
        if dropped > 0:
            text += f"\n[... {dropped} bytes of output dropped ...]\n"
        return text + self.tail.decode("utf-8", "replace")


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
