"""How one command is isolated: the argv that wraps it, and a bounded runner.

Two backends build the same view of the machine for a command:

    /testbed   the slot's repository, read-write (the working directory)
    /tmp       the slot's scratch directory, read-write (on disk, inside the slot)
    /usr /etc /bin /lib* and the Python prefix   read-only binds of the host
    /proc      a fresh procfs of the command's own PID namespace
    /dev       null, zero, full, random, urandom (and /dev/fd links), read-only;
               /dev/shm is the slot's /tmp again, so shared memory counts as its disk

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

Privilege: no sandboxed process ever holds a capability, and `no_new_privs` is set on
every one of them, so a setuid binary gains nothing. When tandem runs as root the command
drops to an unprivileged per-slot uid (`setpriv`), which also makes RLIMIT_NPROC a
per-sandbox bound. Without root:
- bwrap runs the command as the caller's uid in a user namespace with no capabilities
  and no nested user namespaces (`--disable-userns`);
- unshare maps the caller to the unprivileged uid 1000 inside its user namespace; only
  the prelude that builds the view holds namespace capabilities (`--keep-caps`), and it
  drops them all, bounding set included, before anything of the agent's runs.
In both backends PID 1 of the sandbox lives inside the sandbox root (bwrap pivots its
init; the unshare prelude `exec`s through chroot), so /proc/1/root shows nothing of the
host, and chroot escapes need a CAP_SYS_CHROOT the agent's processes do not have.

Limits come from rlimits set right before the command runs (`prlimit`): CPU seconds,
address space, process count, file size, open files, no core dumps. Disk is capped per
slot by the pool (tandem.envs.coding.sandbox.storage).

RLIMIT_AS bounds each process, not their sum. Where tandem may make memory cgroups (root,
a writable hierarchy: tandem.envs.coding.sandbox.cgroup) each command also runs in its own, which
counts everything it holds (memfd, shared memory, tmpfs pages, many processes) against
memory_mb. Where it may not, the seccomp filter refuses memfd and SysV shared memory
(count_memory False), so what is left is mapped memory under RLIMIT_AS, and files under
the slot's disk cap.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from tandem.envs.coding.sandbox import seccomp

SANDBOX_WORKDIR = "/testbed"
SHIM_DIR = "/.tandem/bin"
"""Read-only directory first on PATH inside: `python` and `python3` there are the configured interpreter."""
SANDBOX_TMP = "/tmp"
INSIDE_DIR = Path(__file__).resolve().parent / "inside"
"""Helpers that run inside an unshare sandbox (bound read-only at /.tandem/lib)."""
SECCOMP_EXEC = "/.tandem/lib/seccomp_exec.py"
UNPRIVILEGED_UID = 1000
"""The uid the unshare backend maps the (non-root) caller to inside its user namespace."""
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
                    *([] if os.geteuid() == 0 else _unshare_user_args()), "true"]
        _PROBED[backend] = _probe_once(argv)
        for _ in range(PROBE_TRIES - 1):
            if _PROBED[backend]:
                break
            time.sleep(1)
            _PROBED[backend] = _probe_once(argv)
    return _PROBED[backend]


PROBE_TRIES = 3
"""Probes before a backend counts as unavailable: under a burst of sandboxes one namespace creation can fail
while the kernel still tears the last ones down (a clean-clone CI run saw bwrap's probe fail once in a child
process whose parent's probe had passed)."""


def _probe_once(argv: list[str]) -> bool:
    try:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@dataclass(frozen=True)
class Isolation:
    """Builds the argv that runs `command` isolated inside one slot directory."""

    backend: str
    limits: Limits
    python_exe: str
    ro_paths: tuple[str, ...]
    """Extra host paths bound read-only (the Python prefix, sandbox.extra_ro_paths)."""
    count_memory: bool = False
    """Commands run in a memory cgroup (the pool's), so the seccomp filter may allow memfd and SysV shm."""

    @classmethod
    def create(cls, backend: str, limits: Limits, python: str = "", extra_ro_paths: list[str] | None = None) -> "Isolation":
        exe, py_dirs = python_paths(python)
        ro = _dedupe(py_dirs + [os.path.abspath(p) for p in (extra_ro_paths or []) if os.path.exists(p)])
        return cls(detect_backend(backend), limits, exe, tuple(ro))

    @property
    def env(self) -> dict[str, str]:
        bindir = str(Path(self.python_exe).parent)
        # A venv is only a venv when started from its own bin/ (CPython looks for pyvenv.cfg beside
        # the path it was started as), so that directory comes first when its `python` is ours;
        # the shim dir supplies `python`/`python3` where the interpreter's dir lacks them.
        own = os.path.realpath(os.path.join(bindir, "python")) == os.path.realpath(self.python_exe)
        first = f"{bindir}:{SHIM_DIR}" if own else f"{SHIM_DIR}:{bindir}"
        return {**BASE_ENV, "PATH": f"{first}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

    def _drop(self, uid: int | None) -> list[str]:
        """Leave with no capability (bounding set included where we hold CAP_SETPCAP) and no_new_privs."""
        drop = ["setpriv", "--no-new-privs", "--inh-caps=-all"]
        if uid is not None:
            drop += [f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--bounding-set=-all"]
        elif self.backend == "unshare":  # the prelude's namespace capabilities, kept across exec
            drop += ["--ambient-caps=-all", "--bounding-set=-all"]
        return drop + ["--"]

    def _run(self, command: str) -> list[str]:
        """rlimits, a clean environment, bash, in the working directory."""
        env = ["env", "-i", "-C", SANDBOX_WORKDIR, *(f"{k}={v}" for k, v in self.env.items())]
        return [*self.limits.prlimit_args(), *env, "bash", "-c", command]

    def _system_paths(self) -> list[tuple[str, str | None]]:
        """(path, symlink target or None) for each system path present on the host."""
        out: list[tuple[str, str | None]] = []
        for p in SYSTEM_RO_PATHS:
            if os.path.islink(p):
                out.append((p, os.readlink(p)))
            elif os.path.isdir(p):
                out.append((p, None))
        return out

    def argv(self, slot_dir: Path, command: str, uid: int | None, readonly_testbed: bool = False,
             ro_binds: tuple[tuple[str, str], ...] = (), seccomp_fd: int | None = None) -> list[str]:
        """The argv that runs `command` in the slot; ro_binds are extra (host path, sandbox path) pairs.

        seccomp_fd (bwrap) holds tandem.envs.coding.sandbox.seccomp's filter; see needs_seccomp_fd. The unshare
        backend installs the same filter from inside (SECCOMP_EXEC)."""
        if self.backend == "bwrap":
            return self._bwrap(slot_dir, command, uid, readonly_testbed, ro_binds, seccomp_fd)
        return self._unshare(slot_dir, command, uid, readonly_testbed, ro_binds)

    def needs_seccomp_fd(self) -> bool:
        return self.backend == "bwrap" and seccomp.supported()

    def _bwrap(self, slot_dir: Path, command: str, uid: int | None, readonly_testbed: bool,
               ro_binds: tuple[tuple[str, str], ...], seccomp_fd: int | None) -> list[str]:
        a = ["bwrap", "--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
             "--die-with-parent", "--new-session", "--hostname", "sandbox"]
        if uid is None:  # unprivileged: a user namespace, and no nested ones
            a += ["--unshare-user", "--disable-userns"]
        if seccomp_fd is not None:  # no keyrings, no user namespaces (as root the only guard against them)
            a += ["--seccomp", str(seccomp_fd)]
        for path, target in self._system_paths():
            a += ["--symlink", target, path] if target is not None else ["--ro-bind", path, path]
        # The slot's /tmp and /testbed first: a Python prefix under /tmp (a venv in /tmp) is then
        # bound on top of the slot's /tmp instead of being hidden by it.
        # /dev: bwrap's own (a tmpfs of half the RAM, writable without root) made read-only; its shm
        # directory is the slot's /tmp, so POSIX shared memory is counted with the slot's files.
        a += ["--proc", "/proc", "--dev", "/dev", "--bind", str(slot_dir / "tmp"), SANDBOX_TMP,
              "--bind", str(slot_dir / "tmp"), "/dev/shm", "--remount-ro", "/dev",
              "--ro-bind" if readonly_testbed else "--bind", str(slot_dir / "testbed"), SANDBOX_WORKDIR]
        for src, dest in [(p, p) for p in self.ro_paths] + list(ro_binds):
            # A host parent like /root is mode 700, and bwrap makes missing parents 0700; create
            # them world-traversable so the unprivileged uid reaches the bind and nothing else.
            for parent in reversed(Path(dest).parents[:-1]):
                if str(parent) not in (SANDBOX_TMP, SANDBOX_WORKDIR):
                    a += ["--perms", "0755", "--dir", str(parent)]
            a += ["--ro-bind", src, dest]
        a += ["--perms", "0755", "--dir", SHIM_DIR, "--symlink", self.python_exe, f"{SHIM_DIR}/python",
              "--symlink", self.python_exe, f"{SHIM_DIR}/python3", "--remount-ro", "/",
              "--chdir", SANDBOX_WORKDIR, "--"]
        return a + self._drop(uid) + self._run(command)

    def _unshare(self, slot_dir: Path, command: str, uid: int | None, readonly_testbed: bool,
                 ro_binds: tuple[tuple[str, str], ...]) -> list[str]:
        # The prelude is PID 1 of the new namespaces and holds (namespace) capabilities: it
        # assembles the view on a tmpfs at <slot>/root, makes it read-only, then *execs* into
        # it through chroot, so PID 1 itself ends inside the root. PID 1 never changes its
        # credentials: that would clear the parent-death signal `--kill-child` armed, and an
        # owner killed at that moment would leave the sandbox running. Its child drops them;
        # the agent then cannot ptrace PID 1 or read its /proc entries (it lacks PID 1's caps).
        a = ["unshare", "--fork", "--kill-child", "--pid", "--mount", "--net", "--ipc", "--uts"]
        if uid is None:
            a += _unshare_user_args()
        prelude = self._unshare_prelude(readonly_testbed, ro_binds)
        # PID 1 (sh) runs the command as its child, never as itself: PID 1 ignores signals it has
        # no handler for (SIGXCPU from RLIMIT_CPU, SIGTERM), and it reaps orphans.
        init = ["sh", "-c", '"$@"; exit $?', "sh"]
        filtered = ([self.python_exe, "-I", "-S", SECCOMP_EXEC, seccomp.program(self.count_memory).hex()]
                    if seccomp.supported() else [])
        return a + ["sh", "-c", prelude, "sh", str(slot_dir / "root"), str(slot_dir),
                    *init, *self._drop(uid), *filtered, *self._run(command)]

    def _unshare_prelude(self, readonly_testbed: bool, ro_binds: tuple[tuple[str, str], ...]) -> str:
        ro_dirs = [(p, p) for p, t in self._system_paths() if t is None]
        links = [(p, t) for p, t in self._system_paths() if t is not None]
        lines = [
            "set -eu",
            'NR="$1"; SLOT="$2"; shift 2',
            "mount --make-rprivate /",
            'mount -t tmpfs -o mode=755,size=8m tandem-root "$NR"',
        ]
        lines += [_ro_bind_line(src, dest) for src, dest in ro_dirs]
        lines += [f'ln -s {shlex.quote(t)} "$NR"{shlex.quote(p)}' for p, t in links]
        testbed_ro = ' && mount -o remount,bind,ro,nosuid "$NR/testbed"' if readonly_testbed else ""
        lines += [
            'mkdir -p "$NR/testbed" "$NR/tmp" "$NR/proc" "$NR/dev" "$NR' + SHIM_DIR + '"',
            f'ln -s {shlex.quote(self.python_exe)} "$NR{SHIM_DIR}/python"',
            f'ln -s {shlex.quote(self.python_exe)} "$NR{SHIM_DIR}/python3"',
            'mount --bind "$SLOT/testbed" "$NR/testbed"' + testbed_ro,
            'mount --bind "$SLOT/tmp" "$NR/tmp"',
            'mkdir "$NR/dev/shm" && mount --bind "$SLOT/tmp" "$NR/dev/shm"',
            'mount -t proc -o nosuid,nodev,noexec proc "$NR/proc"',
        ]
        # after /tmp: see _bwrap
        lines += [_ro_bind_line(p, p) for p in self.ro_paths] + [_ro_bind_line(s, d) for s, d in ro_binds]
        lines.append(_ro_bind_line(str(INSIDE_DIR), str(Path(SECCOMP_EXEC).parent)))
        lines += [f'touch "$NR/dev/{d}" && mount --bind /dev/{d} "$NR/dev/{d}"' for d in DEV_NODES]
        lines += [
            'ln -s /proc/self/fd "$NR/dev/fd"',
            'ln -s /proc/self/fd/0 "$NR/dev/stdin"; ln -s /proc/self/fd/1 "$NR/dev/stdout"; '
            'ln -s /proc/self/fd/2 "$NR/dev/stderr"',
            'mount -o remount,bind,ro "$NR"',
            'cd "$NR"',
            'exec chroot "$NR" "$@"',
        ]
        return "\n".join(lines)


def _ro_bind_line(src: str, dest: str) -> str:
    q, d = shlex.quote(src), shlex.quote(dest)
    return (f'mkdir -p "$NR"{d} && mount --bind {q} "$NR"{d} && '
            f'mount -o remount,bind,ro,nosuid "$NR"{d}')


def _unshare_user_args() -> list[str]:
    """Without root: a user namespace where the caller is an ordinary uid, not root."""
    return ["--user", f"--map-user={UNPRIVILEGED_UID}", f"--map-group={UNPRIVILEGED_UID}", "--keep-caps"]
