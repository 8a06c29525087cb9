"""Warm sandbox slots, per-task repository templates, and cleanup whatever happens.

A *template* is one task state checked out once (files + a one-commit git repository,
built by a materializer from tandem.swe_data) and reused by every rollout of that task.
A *slot* is a directory (and, as root, a uid) that holds one rollout's copy of a
template at a time:

    <pool root>/slot-007/testbed        the repository the agent edits (/testbed inside)
    <pool root>/slot-007/tmp            its /tmp
    <pool root>/slot-007/.baseline.git  a private copy of the template's git dir; the
                                        agent's diff is computed against it on the host,
                                        so nothing the agent does to /testbed/.git can
                                        run code on the host or change what is graded
    <pool root>/slot-007/root           mount point for the unshare backend's new root

Slots are created up front (`pool_size`, sized to how many rollouts can be in flight)
and handed out by `acquire`, which copies the template in with retries (the reference
run lost ~11% of single-attempt checkouts under load). Cleanup: every pool registers
with an atexit hook and, when nobody else handles them, SIGTERM/SIGHUP; a process that
is SIGKILLed leaves a directory named after its pid that the next pool start removes,
while its sandboxed processes die with it (parent-death signal).
"""

from __future__ import annotations

import atexit
import hashlib
import logging
import os
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tandem.sandbox.isolation import ExecResult, Isolation, Limits, run_bounded

log = logging.getLogger(__name__)

# Fixed identity and date: a template's commit id depends only on its files.
GIT_IDENTITY = {
    "GIT_AUTHOR_NAME": "tandem", "GIT_AUTHOR_EMAIL": "tandem@localhost",
    "GIT_COMMITTER_NAME": "tandem", "GIT_COMMITTER_EMAIL": "tandem@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}
GIT_EXCLUDES = "__pycache__/\n*.pyc\n.pytest_cache/\n"


class PrepareError(RuntimeError):
    """A task's repository could not be checked out into a sandbox, even after retries."""


class DiffTooLarge(RuntimeError):
    """The agent's changes exceed the size that is graded (never a bug fix; would bloat the handoff)."""


def host_git(args: list[str], cwd: Path | None = None, timeout: float = 120.0, check: bool = True,
             git_dir: Path | None = None, work_tree: Path | None = None,
             max_output: int | None = None) -> subprocess.CompletedProcess:
    """git on the host with no system/global config, hooks or fsmonitor: only what we pass.

    With max_output, stdout is read up to that many bytes and a longer output raises
    DiffTooLarge (the process is killed; nothing larger is held in memory)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/nonexistent", "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_TERMINAL_PROMPT": "0", "LANG": "C.UTF-8", **GIT_IDENTITY}
    if cwd is not None:
        # Never discover a repository above cwd (sandboxes may live inside the project's checkout).
        env["GIT_CEILING_DIRECTORIES"] = str(Path(cwd).resolve().parent)
    pre = ["git", "-c", "core.hooksPath=/dev/null", "-c", "core.fsmonitor=false", "-c", "core.autocrlf=false",
           "-c", "safe.directory=*", "-c", "init.defaultBranch=main"]
    if git_dir is not None:
        pre += [f"--git-dir={git_dir}"]
    if work_tree is not None:
        pre += [f"--work-tree={work_tree}"]
    if max_output is not None:
        return _git_capped(pre + args, cwd, env, timeout, max_output, check)
    out = subprocess.run(pre + args, cwd=cwd, env=env, capture_output=True, timeout=timeout)
    if check and out.returncode != 0:
        raise subprocess.CalledProcessError(out.returncode, ["git", *args], out.stdout, out.stderr)
    return out


def _git_capped(argv: list[str], cwd, env, timeout: float, max_output: int, check: bool) -> subprocess.CompletedProcess:
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=err)
        timer = threading.Timer(timeout, proc.kill)
        timer.start()
        try:
            data = proc.stdout.read(max_output + 1)
            if len(data) > max_output:
                proc.kill()
                raise DiffTooLarge(f"diff exceeds {max_output} bytes")
            proc.stdout.close()
            rc = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        err.seek(0)
        stderr = err.read()
    if check and rc != 0:
        raise subprocess.CalledProcessError(rc, argv, data, stderr)
    return subprocess.CompletedProcess(argv, rc, data, stderr)


def rmtree_hard(path: Path) -> None:
    """Remove a tree even where the sandbox chmod-ed directories to 000."""
    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), stat.S_IRWXU)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, stat.S_IRWXU)
            func(p)
        except FileNotFoundError:
            pass
    if path.exists() or path.is_symlink():
        shutil.rmtree(path, onerror=fix)


# --------------------------------------------------------------------------- templates
Materializer = Callable[[Path], None]
"""Writes one task state (its files, no .git) into an empty directory."""


class TemplateCache:
    """Each task state is checked out once, as a one-commit repository, then copied per rollout."""

    def __init__(self, root: Path, retries: int = 4, backoff_s: float = 0.25):
        self.root = root
        self.backoff_s = backoff_s
        root.mkdir(parents=True, exist_ok=True)
        self.retries = retries
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.builds = 0
        self.failed_attempts = 0

    def path(self, key: str) -> Path:
        safe = "".join(c if c.isalnum() or c in "-._" else "_" for c in key)[:80]
        return self.root / f"{safe}-{hashlib.sha1(key.encode()).hexdigest()[:8]}"

    def get(self, key: str, materialize: Materializer, message: str = "tandem task state") -> Path:
        """The template directory for `key` (holding testbed/ with .git), built on first use."""
        with self._guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            dest = self.path(key)
            if (dest / "READY").exists():
                return dest
            last: Exception | None = None
            for attempt in range(self.retries + 1):
                try:
                    self._build(dest, materialize, message)
                    self.builds += 1
                    return dest
                except Exception as err:  # network checkouts fail transiently under load
                    last = err
                    self.failed_attempts += 1
                    log.warning("checkout of %s failed (attempt %d/%d): %s", key, attempt + 1, self.retries + 1, err)
                    if attempt < self.retries:
                        time.sleep(min(8.0, self.backoff_s * 2**attempt))
            raise PrepareError(f"could not check out {key} after {self.retries + 1} attempts: {last}") from last

    def _build(self, dest: Path, materialize: Materializer, message: str) -> None:
        tmp = dest.with_name(dest.name + f".tmp{os.getpid()}.{threading.get_ident()}")
        rmtree_hard(tmp)
        testbed = tmp / "testbed"
        testbed.mkdir(parents=True)
        materialize(testbed)
        rmtree_hard(testbed / ".git")
        host_git(["init", "-q", "--template="], cwd=testbed)  # no sample hooks: fewer files to copy per slot
        (testbed / ".git" / "info").mkdir(exist_ok=True)
        (testbed / ".git" / "info" / "exclude").write_text(GIT_EXCLUDES)
        host_git(["add", "-A"], cwd=testbed)
        host_git(["commit", "-q", "--allow-empty", "-m", message], cwd=testbed)
        (tmp / "READY").write_text(host_git(["rev-parse", "HEAD"], cwd=testbed).stdout.decode().strip())
        rmtree_hard(dest)
        os.replace(tmp, dest)

    @staticmethod
    def commit_of(template: Path) -> str:
        return (template / "READY").read_text().strip()

    def close(self) -> None:
        rmtree_hard(self.root)
        _LIVE.discard(self)

    @classmethod
    def ephemeral(cls, sandbox_root: Path, retries: int = 4) -> "TemplateCache":
        """A cache private to this process, removed at exit like the pools."""
        _sweep_stale(sandbox_root)
        cache = cls(sandbox_root / f"pool-{os.getpid()}-templates", retries)
        _LIVE.add(cache)
        _install_cleanup_hooks()
        return cache


# --------------------------------------------------------------------------- slots
@dataclass
class Slot:
    index: int
    dir: Path
    uid: int | None
    """The unprivileged uid commands run as (root only); None = the caller's uid in a user namespace."""


@dataclass
class Sandbox:
    """One rollout's prepared slot: run commands, measure its disk use, take its diff."""

    pool: "SandboxPool"
    slot: Slot
    template: Path
    exec_times: list[float] = field(default_factory=list)
    closed: bool = False
    _busy: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Held while a command runs, so close() from another thread waits for it."""

    @property
    def testbed(self) -> Path:
        return self.slot.dir / "testbed"

    def exec(self, command: str, timeout_s: float | None = None) -> ExecResult:
        with self._busy:
            if self.closed:
                raise RuntimeError("sandbox already released")
            timeout = self.pool.command_timeout_s if timeout_s is None else timeout_s
            argv = self.pool.isolation.argv(self.slot.dir, command, self.slot.uid)
            result = run_bounded(argv, timeout, self.pool.max_output_bytes)
            self.exec_times.append(result.duration_s)
            return result

    def disk_usage(self, limit: int | None = None) -> int:
        """Bytes used by testbed and tmp (stops counting once past `limit`)."""
        total = 0
        stack = [self.slot.dir / "testbed", self.slot.dir / "tmp"]
        while stack:
            d = stack.pop()
            try:
                with os.scandir(d) as it:
                    for e in it:
                        try:
                            st = e.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
                        if e.is_dir(follow_symlinks=False):
                            stack.append(Path(e.path))
            except OSError:
                continue
            if limit is not None and total > limit:
                break
        return total

    def diff(self, max_bytes: int = 2_000_000) -> str:
        """The agent's changes as a git patch, computed on the host against the private baseline.

        Runs after the agent's processes are gone (each command's PID namespace dies with
        it), so the tree is stable. git stores symlinks as links and never reads through
        them, and ignores FIFOs/devices, so a hostile tree cannot make this read host files.
        A diff larger than max_bytes raises DiffTooLarge without being read into memory.
        """
        if self.slot.uid is None:
            _make_owner_accessible(self.testbed)
        kw = dict(git_dir=self.slot.dir / ".baseline.git", work_tree=self.testbed, cwd=self.slot.dir, timeout=120.0)
        host_git(["add", "-A"], **kw)
        out = host_git(["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", "HEAD"],
                       max_output=max_bytes, **kw)
        return out.stdout.decode("utf-8", "replace")

    def close(self) -> None:
        with self._busy:
            if self.closed:
                return
            self.closed = True
        self.pool.release(self)

    def __enter__(self) -> "Sandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _make_owner_accessible(root: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            try:
                st = os.lstat(p)
                if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o700) != 0o700:
                    os.chmod(p, st.st_mode | 0o700)
                elif stat.S_ISREG(st.st_mode) and not st.st_mode & 0o400:
                    os.chmod(p, st.st_mode | 0o600)
            except OSError:
                pass


_LIVE: "weakref.WeakSet" = weakref.WeakSet()
"""Pools and template caches to remove at exit."""
_HANDLERS_INSTALLED = False


def _cleanup_all() -> None:
    for owner in list(_LIVE):
        owner.close()


def _on_signal(signum, frame) -> None:
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _install_cleanup_hooks() -> None:
    """atexit always; SIGTERM/SIGHUP only where nobody installed a handler (the launcher may own them)."""
    global _HANDLERS_INSTALLED
    if _HANDLERS_INSTALLED:
        return
    _HANDLERS_INSTALLED = True
    atexit.register(_cleanup_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            if signal.getsignal(sig) in (signal.SIG_DFL, None):
                signal.signal(sig, _on_signal)


def _sweep_stale(root: Path) -> None:
    """Remove pool directories left by processes that died without cleaning up (SIGKILL)."""
    if not root.exists():
        return
    for d in root.glob("pool-*"):
        try:
            pid = int(d.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            rmtree_hard(d)


class SandboxPool:
    """`size` warm slots; `acquire` blocks until one is free (run it off the event loop)."""

    def __init__(self, root: Path, size: int, isolation: Isolation, templates: TemplateCache, *,
                 name: str = "agent", command_timeout_s: float = 60.0, max_output_bytes: int = 1_000_000,
                 base_uid: int | None = None):
        if size < 1:
            raise ValueError("sandbox pool size must be at least 1")
        self.isolation, self.templates = isolation, templates
        self.command_timeout_s, self.max_output_bytes = command_timeout_s, max_output_bytes
        _sweep_stale(root)
        self.dir = root / f"pool-{os.getpid()}-{name}"
        rmtree_hard(self.dir)
        self.dir.mkdir(parents=True)
        as_root = os.geteuid() == 0
        self._free: list[Slot] = []
        for i in range(size):
            slot = Slot(i, self.dir / f"slot-{i:03d}", (base_uid + i) if as_root and base_uid is not None else None)
            slot.dir.mkdir()
            self._free.append(slot)
        self.size = size
        self._cond = threading.Condition()
        self._in_use: set[int] = set()
        self._closed = False
        self.prepare_times: list[float] = []
        _LIVE.add(self)
        _install_cleanup_hooks()

    @classmethod
    def from_config(cls, sc, root: Path, size: int, templates: TemplateCache, name: str, uid_offset: int = 0,
                    command_timeout_s: float | None = None) -> "SandboxPool":
        iso = Isolation.create(sc.backend, Limits.from_config(sc), sc.python, sc.extra_ro_paths)
        return cls(root, size, iso, templates, name=name,
                   command_timeout_s=sc.command_timeout_s if command_timeout_s is None else command_timeout_s,
                   max_output_bytes=sc.max_output_bytes, base_uid=sc.base_uid + uid_offset)

    @property
    def backend(self) -> str:
        return self.isolation.backend

    def acquire(self, template: Path, timeout_s: float | None = None) -> Sandbox:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not self._free:
                if self._closed:
                    raise RuntimeError("sandbox pool is closed")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no free sandbox slot within {timeout_s}s (pool size {self.size})")
                self._cond.wait(timeout=left)
            slot = self._free.pop()
            self._in_use.add(slot.index)
        start = time.monotonic()
        try:
            self._fill(slot, template)
        except BaseException:
            self._return(slot)
            raise
        self.prepare_times.append(time.monotonic() - start)
        return Sandbox(self, slot, template)

    def _fill(self, slot: Slot, template: Path) -> None:
        self._wipe(slot)
        shutil.copytree(template / "testbed", slot.dir / "testbed", symlinks=True)
        shutil.copytree(template / "testbed" / ".git", slot.dir / ".baseline.git", symlinks=True)
        (slot.dir / "tmp").mkdir()
        (slot.dir / "root").mkdir()
        if slot.uid is not None:
            for sub in ("testbed", "tmp"):
                chown_tree(slot.dir / sub, slot.uid)

    @staticmethod
    def _wipe(slot: Slot) -> None:
        for sub in ("testbed", "tmp", ".baseline.git", "root"):
            rmtree_hard(slot.dir / sub)

    def release(self, sandbox: Sandbox) -> None:
        try:
            self._wipe(sandbox.slot)
        finally:
            self._return(sandbox.slot)

    def _return(self, slot: Slot) -> None:
        with self._cond:
            self._in_use.discard(slot.index)
            self._free.append(slot)
            self._cond.notify()

    def close(self) -> None:
        """Remove every slot. Safe to call twice, from atexit, or from a signal handler."""
        if self._closed:
            return
        self._closed = True
        rmtree_hard(self.dir)
        _LIVE.discard(self)
        if self._cond.acquire(blocking=False):  # never block: this may run inside a signal handler
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()


def chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)
