"""How one command is isolated: the argv that wraps it, and a bounded runner.

Two backends build the same view of the machine for a command:

    /testbed   the slot's repository, read-write (the working directory)
    /tmp       the slot's scratch directory, read-write (on disk, inside the slot)
    /usr /etc /bin /lib* and the Python prefix   read-only binds of the host
    /proc      a fresh procfs of the command's own PID namespace
    /dev       null, zero, full, random, urandom (and /dev/fd links)

Everything else of the host (home directories, /work, the task data holding the hidden
tests, other sandboxes) is simply absent. Both backends also give the command new
network (only a down-or-isolated loopback), PID, IPC and UTS namespaces, so no socket
reaches the host and every process the command starts dies with it.

- **bwrap** (bubblewrap, Debian package `bubblewrap`): builds the view with bind mounts
  in a fresh mount namespace and is killed together with its whole PID namespace if
  tandem dies (`--die-with-parent`, `--new-session` against terminal injection).
- **unshare** (util-linux): the fallback when bwrap is not installed. `unshare` creates
  the same namespaces and a shell prelude builds the same view on a tmpfs root, then
  `chroot`s into it. Same guarantees, built from more moving parts.

Limits come from rlimits set right before the command runs (`prlimit`): CPU seconds,
address space, process count, file size, open files, no core dumps. When tandem runs as
root the command additionally drops to an unprivileged per-slot uid with every
capability removed (`setpriv`), which is what makes RLIMIT_NPROC a per-sandbox bound
(it counts processes per uid). Without root, the user namespace makes the caller's uid
appear as root inside; NPROC then counts per namespace on Linux >= 5.14 (ucounts); older
kernels count all of the user's processes against it.

RLIMIT_AS bounds each process, not their sum; with the process limit that caps a
sandbox at max_processes x memory_mb. A cgroup would bound the sum but needs a writable
cgroup hierarchy, which containers rarely grant.
"""

from __future__ import annotations

import atexit
import concurrent.futures.thread  # noqa: F401  (registers its thread-join exit hook before ours)
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

SANDBOX_WORKDIR = "/testbed"
SHIM_DIR = "/.tandem/bin"
"""Read-only directory first on PATH inside: `python` and `python3` there are the configured interpreter."""
HOST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_TMP = "/tmp"
# Host directories the command may read. Symlinks among them (/bin -> usr/bin on merged-/usr
# systems) are recreated as symlinks so paths resolve the same way inside.
SYSTEM_RO_PATHS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
DEV_NODES = ("null", "zero", "full", "random", "urandom")
# mini-swe-agent's environment variables: no pagers, no progress bars.
BASE_ENV = {
    "HOME": SANDBOX_TMP,
    "TMPDIR": SANDBOX_TMP,
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "PAGER": "cat",
    "MANPAGER": "cat",
    "LESS": "-R",
    "PIP_PROGRESS_BAR": "off",
    "TQDM_DISABLE": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONUNBUFFERED": "1",
    "GIT_PAGER": "cat",
    "TERM": "dumb",
}


SHUTTING_DOWN = threading.Event()
"""Set when the interpreter exits: running commands are killed at once instead of holding up exit."""
# Python joins executor threads before atexit handlers run; threading's own exit hooks run
# before that join (newest first; concurrent.futures.thread, imported above, registered its
# join hook already), so commands blocking a worker thread die immediately.
_register = getattr(threading, "_register_atexit", None)
(_register or atexit.register)(SHUTTING_DOWN.set)


class SandboxUnavailable(RuntimeError):
    """No isolation backend works on this machine; commands are never run unisolated."""


@dataclass(frozen=True)
class Limits:
    cpu_time_s: int = 60
    memory_mb: int = 2048
    max_processes: int = 64
    max_file_mb: int = 64
    max_open_files: int = 256

    @classmethod
    def from_config(cls, sc) -> "Limits":
        return cls(sc.cpu_time_s, sc.memory_mb, sc.max_processes, sc.max_file_mb, sc.max_open_files)

    def prlimit_args(self) -> list[str]:
        mib = 1024 * 1024
        return [
            "prlimit",
            f"--cpu={self.cpu_time_s}:{self.cpu_time_s + 1}",  # SIGXCPU first, SIGKILL a second later
            f"--as={self.memory_mb * mib}",
            f"--nproc={self.max_processes}",
            f"--fsize={self.max_file_mb * mib}",
            f"--nofile={self.max_open_files}",
            "--core=0",
            "--",
        ]


@dataclass
class ExecResult:
    output: str
    """stdout and stderr interleaved, as the command wrote them (middle dropped past the byte cap)."""
    returncode: int
    timed_out: bool
    duration_s: float
    output_bytes: int
    """Bytes the command wrote in total, including any that were dropped."""


def python_paths(python: str = "") -> tuple[str, list[str]]:
    """(interpreter path, host directories it needs) for the Python exposed in the sandbox.

    Only the interpreter's prefixes (a venv and its base installation) are bound, never
    arbitrary sys.path entries: those include the current directory or PYTHONPATH, which
    would expose the project, and with it the hidden tests, to the agent.
    """
    exe = python or sys.executable
    if python:
        probe = subprocess.run([exe, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                               capture_output=True, text=True, timeout=60, check=True)
        prefixes = probe.stdout.split()[:2]
    else:
        prefixes = [sys.prefix, sys.base_prefix]
    return str(Path(exe).absolute()), _dedupe(prefixes)


def _under(path: str, root: str) -> bool:
    return os.path.abspath(path) == os.path.abspath(root) or os.path.abspath(path).startswith(os.path.abspath(root) + os.sep)


def _dedupe(paths: list[str]) -> list[str]:
    out: list[str] = []
    for p in sorted({os.path.abspath(p) for p in paths}, key=len):
        if not any(_under(p, q) for q in out) and not any(_under(p, s) for s in SYSTEM_RO_PATHS if os.path.isdir(s) and not os.path.islink(s)):
            out.append(p)
    return out


def detect_backend(preference: str = "auto") -> str:
    """The backend to use: the preferred one when it works here, else fail loudly."""
    if preference in ("auto", "bwrap") and shutil.which("bwrap") and _probe("bwrap"):
        return "bwrap"
    if preference == "bwrap":
        raise SandboxUnavailable("sandbox.backend = 'bwrap' but bubblewrap is not installed or cannot create "
                                 "namespaces here (apt-get install bubblewrap)")
    if shutil.which("unshare") and shutil.which("prlimit") and _probe("unshare"):
        return "unshare"
    raise SandboxUnavailable("no sandbox backend works: install bubblewrap (apt-get install bubblewrap), or allow "
                             "user namespaces for util-linux `unshare`")


_PROBED: dict[str, bool] = {}


def _probe(backend: str) -> bool:
    """Can this backend create its namespaces here? (Cached; containers often forbid it.)"""
    if backend not in _PROBED:
        if backend == "bwrap":
            argv = ["bwrap", "--ro-bind", "/", "/", "--unshare-net", "--unshare-pid", "--die-with-parent",
                    *([] if os.geteuid() == 0 else ["--unshare-user"]), "true"]
        else:
            argv = ["unshare", "--fork", "--pid", "--mount", "--net",
                    *([] if os.geteuid() == 0 else ["--user", "--map-root-user"]), "true"]
        try:
            _PROBED[backend] = subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            _PROBED[backend] = False
    return _PROBED[backend]


@dataclass(frozen=True)
class Isolation:
    """Builds the argv that runs `command` isolated inside one slot directory."""

    backend: str
    limits: Limits
    python_exe: str
    ro_paths: tuple[str, ...]
    """Extra host paths bound read-only (the Python prefix, sandbox.extra_ro_paths)."""

    @classmethod
    def create(cls, backend: str, limits: Limits, python: str = "", extra_ro_paths: list[str] | None = None) -> "Isolation":
        exe, py_dirs = python_paths(python)
        ro = _dedupe(py_dirs + [os.path.abspath(p) for p in (extra_ro_paths or []) if os.path.exists(p)])
        return cls(detect_backend(backend), limits, exe, tuple(ro))

    @property
    def env(self) -> dict[str, str]:
        bindir = str(Path(self.python_exe).parent)
        return {**BASE_ENV, "PATH": f"{SHIM_DIR}:{bindir}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

    def _inner(self, command: str, uid: int | None) -> list[str]:
        """What runs inside the namespaces: drop to the slot uid, set rlimits, clean env, bash."""
        drop = []
        if uid is not None:
            drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all",
                    "--bounding-set=-all", "--"]
        env = ["env", "-i", "-C", SANDBOX_WORKDIR, *(f"{k}={v}" for k, v in self.env.items())]
        return [*drop, *self.limits.prlimit_args(), *env, "bash", "-c", command]

    def _system_paths(self) -> list[tuple[str, str | None]]:
        """(path, symlink target or None) for each system path present on the host."""
        out = []
        for p in SYSTEM_RO_PATHS:
            if os.path.islink(p):
                out.append((p, os.readlink(p)))
            elif os.path.isdir(p):
                out.append((p, None))
        return out

    def argv(self, slot_dir: Path, command: str, uid: int | None) -> list[str]:
        if self.backend == "bwrap":
            return self._bwrap(slot_dir, command, uid)
        return self._unshare(slot_dir, command, uid)

    def _bwrap(self, slot_dir: Path, command: str, uid: int | None) -> list[str]:
        a = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if uid is None:  # unprivileged: a user namespace, and no nested ones
            a += ["--unshare-user", "--disable-userns"]
        for path, target in self._system_paths():
            a += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
        for path in self.ro_paths:
            # A host parent like /root is mode 700; recreate the parents world-traversable so the
            # unprivileged uid can reach the bound prefix without seeing anything else in them.
            for parent in reversed(Path(path).parents[:-1]):
                a += ["--perms", "0755", "--dir", str(parent)]
            a += ["--ro-bind", path, path]
        a += ["--dir", SHIM_DIR, "--symlink", self.python_exe, f"{SHIM_DIR}/python",
              "--symlink", self.python_exe, f"{SHIM_DIR}/python3",
              "--proc", "/proc", "--dev", "/dev",
              "--bind", str(slot_dir / "tmp"), SANDBOX_TMP,
              "--bind", str(slot_dir / "testbed"), SANDBOX_WORKDIR,
              "--remount-ro", "/", "--chdir", SANDBOX_WORKDIR, "--"]
        return a + self._inner(command, uid)

    def _unshare(self, slot_dir: Path, command: str, uid: int | None) -> list[str]:
        # The prelude runs as (namespace) root in a private mount namespace: it assembles the
        # view on a tmpfs at <slot>/root, makes it read-only, and chroots into it.
        ro_dirs = [p for p, t in self._system_paths() if t is None] + list(self.ro_paths)
        links = [(p, t) for p, t in self._system_paths() if t is not None]
        lines = [
            "set -eu",
            'NR="$1"; SLOT="$2"; shift 2',
            "mount --make-rprivate /",
            'mount -t tmpfs -o mode=755,size=8m tandem-root "$NR"',
        ]
        for p in ro_dirs:
            q = shlex.quote(p)
            lines.append(f'mkdir -p "$NR"{q} && mount --bind {q} "$NR"{q} && mount -o remount,bind,ro "$NR"{q}')
        for p, t in links:
            lines.append(f'ln -s {shlex.quote(t)} "$NR"{shlex.quote(p)}')
        lines += [
            'mkdir -p "$NR/testbed" "$NR/tmp" "$NR/proc" "$NR/dev" "$NR' + SHIM_DIR + '"',
            f'ln -s {shlex.quote(self.python_exe)} "$NR{SHIM_DIR}/python"',
            f'ln -s {shlex.quote(self.python_exe)} "$NR{SHIM_DIR}/python3"',
            'mount --bind "$SLOT/testbed" "$NR/testbed"',
            'mount --bind "$SLOT/tmp" "$NR/tmp"',
            'mount -t proc -o nosuid,nodev,noexec proc "$NR/proc"',
        ]
        for d in DEV_NODES:
            lines.append(f'touch "$NR/dev/{d}" && mount --bind /dev/{d} "$NR/dev/{d}"')
        lines += [
            'ln -s /proc/self/fd "$NR/dev/fd"',
            'ln -s /proc/self/fd/0 "$NR/dev/stdin"; ln -s /proc/self/fd/1 "$NR/dev/stdout"; '
            'ln -s /proc/self/fd/2 "$NR/dev/stderr"',
            'mount -o remount,bind,ro "$NR"',
            'cd "$NR"',
            # Not exec: the command must not be PID 1 of its namespace, where signals without a
            # handler (SIGXCPU from RLIMIT_CPU, SIGTERM) would be ignored. sh stays as init.
            'set +e',
            'chroot "$NR" "$@"',
            'exit $?',
        ]
        a = ["unshare", "--fork", "--kill-child", "--pid", "--mount", "--net", "--ipc", "--uts"]
        if uid is None:
            a += ["--user", "--map-root-user"]
        return a + ["sh", "-c", "\n".join(lines), "sh", str(slot_dir / "root"), str(slot_dir),
                    *self._inner(command, uid)]


def run_bounded(argv: list[str], timeout_s: float, max_output_bytes: int) -> ExecResult:
    """Run argv with stdout+stderr merged; kill its process group at the timeout.

    Output is read as it comes and only the first and last max_output_bytes/2 are kept,
    so a command that prints gigabytes costs no memory. `setpriv --pdeathsig` makes the
    wrapper die with this process, and the wrapper takes the namespace down with it.
    """
    start = time.monotonic()
    proc = subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", *argv], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True,
                            env={"PATH": HOST_PATH, "LANG": "C.UTF-8"})
    half = max(1, max_output_bytes // 2)
    head, tail = bytearray(), bytearray()
    total = 0
    timed_out = False
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    fd = proc.stdout.fileno()
    try:
        while True:
            remaining = timeout_s - (time.monotonic() - start)
            if remaining <= 0 or SHUTTING_DOWN.is_set():
                timed_out = True
                break
            if not sel.select(timeout=min(remaining, 0.5)):
                continue
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            total += len(chunk)
            if len(head) < half:
                take = half - len(head)
                head += chunk[:take]
                chunk = chunk[take:]
            if chunk:
                tail += chunk
                if len(tail) > half:
                    del tail[: len(tail) - half]
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
        proc.stdout.close()
        returncode = proc.wait()
    dropped = total - len(head) - len(tail)
    text = head.decode("utf-8", "replace")
    if dropped > 0:
        text += f"\n[... {dropped} bytes of output dropped ...]\n"
    text += tail.decode("utf-8", "replace")
    return ExecResult(text, -9 if timed_out else returncode, timed_out, time.monotonic() - start, total)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
