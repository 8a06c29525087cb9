"""Warm sandbox slots: a rollout's copy of a task, cleaned up whatever happens.

A *slot* is a directory (and, as root, a uid) that holds one rollout's copy of a
template (tandem.envs.coding.sandbox.templates) at a time:

    <pool root>/slot-007/testbed        the repository the agent edits (/testbed inside)
    <pool root>/slot-007/tmp            its /tmp
    <pool root>/slot-007/.baseline.git  a private copy of the template's git dir; the
                                        agent's diff is computed against it on the host,
                                        so nothing the agent does to /testbed/.git can
                                        run code on the host or change what is graded
    <pool root>/slot-007/root           mount point for the unshare backend's new root

Slots are created up front (`pool_size`, sized to how many rollouts can be in flight)
and handed out by `acquire`. As root each slot directory is a capped tmpfs
(tandem.envs.coding.sandbox.storage), so wiping it is an unmount and a fresh mount. A slot whose
wipe or fill fails is *retired* and replaced by a new one, never handed out again; only
when replacements fail too does the pool raise SandboxInfraError. A *graded* sandbox
(acquire(graded=True)) keeps its repository owned by tandem and mounted read-only: the
tests it runs can write /tmp only. Pools are removed at exit (tandem.envs.coding.sandbox.lifecycle).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tandem.errors import RunFatal
from tandem.envs.coding.sandbox import lifecycle, seccomp
from tandem.envs.coding.sandbox.cgroup import MemoryCgroups
from tandem.envs.coding.sandbox.isolation import Isolation, Limits
from tandem.envs.coding.sandbox.runner import ExecResult, run_bounded
from tandem.envs.coding.sandbox.storage import (DiskCap, check_memory_budget, chown_tree, make_owner_accessible, mount_tmpfs,
                                    remove_tree, tmpfs_available, unmount, usage, walk_tree)
from tandem.envs.coding.sandbox.templates import TemplateCache, host_git

log = logging.getLogger(__name__)


class SandboxInfraError(RunFatal):
    """The sandbox machinery itself failed (not the agent's commands), repeatedly: the run stops with this cause."""


@dataclass
class Slot:
    index: int
    dir: Path
    uid: int | None
    """The unprivileged uid commands run as (root only); None = the caller's uid in a user namespace."""
    capped: bool = False
    """The slot directory is its own size- and inode-capped tmpfs."""


@dataclass
class Sandbox:
    """One rollout's prepared slot: run commands, measure its disk use, take its diff."""

    pool: "SandboxPool"
    slot: Slot
    template: Path
    graded: bool = False
    """The repository is owned by tandem inside (the grader's sandbox): read-only, until open_graded()."""
    opened: bool = False
    """open_graded() made the graded copy the slot uid's, but for its protected files."""
    exec_times: list[float] = field(default_factory=list)
    closed: bool = False
    _busy: threading.Lock = field(default_factory=threading.Lock, repr=False)
    """Held while a command runs, so close() from another thread waits for it."""

    @property
    def testbed(self) -> Path:
        return self.slot.dir / "testbed"

    def exec(self, command: str, timeout_s: float | None = None, ro_binds: tuple[tuple[str, str], ...] = (),
             side_channel: tuple[int, int] | None = None) -> ExecResult:
        """Run `command` in the slot; ro_binds and side_channel as in Isolation.argv and run_bounded."""
        with self._busy:
            if self.closed:
                raise RuntimeError("sandbox already released")
            timeout = self.pool.command_timeout_s if timeout_s is None else timeout_s
            iso, cgroups = self.pool.isolation, self.pool.cgroups
            filter_fd = seccomp.program_fd(iso.count_memory) if iso.needs_seccomp_fd() else None
            group = None
            try:
                argv = iso.argv(self.slot.dir, command, self.slot.uid, self.graded and not self.opened, ro_binds,
                                filter_fd)
                if cgroups is not None:
                    group = cgroups.create(f"{self.pool.name}-{self.slot.index}", iso.limits.memory_mb << 20)
                    argv = cgroups.enter_argv(group, argv)
            except BaseException:
                if filter_fd is not None:
                    os.close(filter_fd)
                for fd in side_channel or ():
                    os.close(fd)
                raise
            try:
                result = run_bounded(argv, timeout, self.pool.max_output_bytes, side_channel,
                                     give_fds=() if filter_fd is None else (filter_fd,))
            finally:
                if group is not None and cgroups is not None:
                    cgroups.remove(group)
            self.exec_times.append(result.duration_s)
            return result

    def open_graded(self, protected: list[str]) -> bool:
        """Make the graded copy writable for the tests' run, as a repository is under plain pytest (code that
        writes a cache beside its module works), but for `protected` (relative paths: the graded test files,
        conftest.py): those stay tandem's, read-only, in directories tandem owns with the sticky bit, so the
        run may add files beside them but never write, remove or rename them or a directory above them.
        The copy is the slot's own and wiped after the run (a throw-away layer). Only with a slot uid:
        without one the run's user owns every file, so the copy stays a read-only mount (False)."""
        if not self.graded or self.slot.uid is None:
            return False
        chown_tree(self.testbed, self.slot.uid)
        root = os.path.realpath(self.testbed)
        for rel in protected:
            path = Path(os.path.realpath(self.testbed / os.path.dirname(rel))) / os.path.basename(rel)
            if not str(path).startswith(root + os.sep) or not os.path.lexists(path):
                continue
            if stat.S_ISREG(os.lstat(path).st_mode):
                os.chown(path, 0, 0, follow_symlinks=False)
                os.chmod(path, 0o444)
            for parent in [path.parent, *path.parent.parents]:
                if not str(parent).startswith(root):
                    break
                if stat.S_ISDIR(os.lstat(parent).st_mode):
                    os.chown(parent, 0, 0, follow_symlinks=False)
                    os.chmod(parent, 0o1777)
        self.opened = True
        return True

    def disk_usage(self, limit: int | None = None, inode_limit: int | None = None) -> tuple[int, int]:
        """(bytes, files and directories) used by the slot: exact on a capped slot, else counted over
        testbed and tmp (counting stops past either limit)."""
        if self.slot.capped:
            return usage(self.slot.dir)
        total, inodes = 0, 0
        for sub in ("testbed", "tmp"):
            for _, st in walk_tree(self.slot.dir / sub):
                total += st.st_blocks * 512 if hasattr(st, "st_blocks") else st.st_size
                inodes += 1
                if (limit is not None and total > limit) or (inode_limit is not None and inodes > inode_limit):
                    return total, inodes
        return total, inodes

    def over_disk_cap(self) -> bool:
        """Past sandbox.max_workdir_mb or sandbox.max_inodes (measured: the hard cap is a tmpfs, as root)."""
        cap = self.pool.measured_cap
        used, inodes = self.disk_usage(cap.max_bytes, cap.max_inodes)
        return used > cap.max_bytes or inodes > cap.max_inodes

    def diff(self, max_bytes: int = 2_000_000) -> str:
        """diff_bytes() as text for people (an undecodable byte shown as U+FFFD); grading takes the bytes."""
        return self.diff_bytes(max_bytes).decode("utf-8", "replace")

    def diff_bytes(self, max_bytes: int = 2_000_000) -> bytes:
        """The agent's changes as a git patch, computed on the host against the private baseline.

        Runs after the agent's processes are gone (each command's PID namespace dies with
        it), so the tree is stable. git stores symlinks as links and never reads through
        them, and ignores FIFOs/devices, so a hostile tree cannot make this read host files.
        A diff larger than max_bytes raises DiffTooLarge without being read into memory.
        """
        if self.slot.uid is None:
            make_owner_accessible(self.testbed)
        kw: dict[str, Any] = dict(git_dir=self.slot.dir / ".baseline.git", work_tree=self.testbed, cwd=self.slot.dir, timeout=120.0)
        host_git(["add", "-A"], **kw)
        out = host_git(["diff", "--cached", "--binary", "--no-color", "--no-ext-diff", "--no-renames", "HEAD"],
                       max_output=max_bytes, **kw)
        return out.stdout  # bytes: a source file in any encoding is graded as the agent wrote it

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


class SandboxPool:
    """`size` warm slots; `acquire` blocks until one is free (run it off the event loop)."""

    FILL_ATTEMPTS = 3
    """Slots tried (each failure retires one) before acquire gives up with SandboxInfraError."""

    def __init__(self, root: Path, size: int, isolation: Isolation, templates: TemplateCache, *,
                 name: str = "agent", command_timeout_s: float = 60.0, max_output_bytes: int = 1_000_000,
                 base_uid: int | None = None, disk_cap: DiskCap | None = None):
        self.name = name
        self.measured_cap = disk_cap or DiskCap(512 << 20, 50_000)
        """The caps a slot is measured against after each agent command (over_disk_cap)."""
        self.cgroups = MemoryCgroups.detect()
        """Per-command memory cgroups where this process may make them (tandem.envs.coding.sandbox.cgroup)."""
        isolation = dataclasses.replace(isolation, count_memory=self.cgroups is not None)
        if size < 1:
            raise ValueError("sandbox pool size must be at least 1")
        self.isolation, self.templates = isolation, templates
        self.command_timeout_s, self.max_output_bytes = command_timeout_s, max_output_bytes
        lifecycle.sweep_stale(root)
        self.dir = root / f"pool-{os.getpid()}-{name}"
        remove_tree(self.dir)
        self.dir.mkdir(parents=True)
        self.disk_cap = disk_cap if disk_cap is not None and tmpfs_available(self.dir) else None
        """The hard per-slot cap, when this process can mount one (root); else usage is measured."""
        self._uid_base = base_uid if os.geteuid() == 0 else None
        self.size = size
        self._cond = threading.Condition()
        self._in_use: set[int] = set()
        self._closed = False
        self._next_index = 0
        self.prepare_times: list[float] = []
        self.retired: list[str] = []
        """Why each retired slot was taken out of service."""
        lifecycle.LIVE.add(self)
        lifecycle.install_cleanup_hooks()
        self._free: list[Slot] = [self._new_slot(i) for i in range(size)]
        if self.disk_cap:
            check_memory_budget(size, self.disk_cap)

    @classmethod
    def from_config(cls, sc, root: Path, size: int, templates: TemplateCache, name: str, uid_offset: int = 0,
                    command_timeout_s: float | None = None) -> "SandboxPool":
        iso = Isolation.create(sc.backend, Limits.from_config(sc), sc.python, sc.extra_ro_paths)
        return cls(root, size, iso, templates, name=name,
                   command_timeout_s=sc.command_timeout_s if command_timeout_s is None else command_timeout_s,
                   max_output_bytes=sc.max_output_bytes, base_uid=sc.base_uid + uid_offset,
                   disk_cap=DiskCap.from_config(sc))

    @property
    def backend(self) -> str:
        return self.isolation.backend

    def _new_slot(self, uid_index: int) -> Slot:
        """A fresh slot directory (a capped tmpfs when possible); uid_index picks its uid."""
        index, self._next_index = self._next_index, self._next_index + 1
        uid = None if self._uid_base is None else self._uid_base + uid_index
        slot = Slot(index, self.dir / f"slot-{index:03d}", uid, capped=self.disk_cap is not None)
        slot.dir.mkdir()
        if self.disk_cap is not None:
            mount_tmpfs(slot.dir, self.disk_cap)
        return slot

    def acquire(self, template: Path, timeout_s: float | None = None, graded: bool = False) -> Sandbox:
        """A slot holding a fresh copy of `template`; graded: the repository stays read-only inside."""
        for attempt in range(self.FILL_ATTEMPTS):
            slot = self._take(timeout_s)
            start = time.monotonic()
            try:
                self._fill(slot, template, graded)
            except Exception as err:
                self._retire(slot, f"fill failed: {type(err).__name__}: {err}")
                if attempt + 1 == self.FILL_ATTEMPTS:
                    raise SandboxInfraError(f"{self.FILL_ATTEMPTS} sandbox slots in a row could not be filled from "
                                            f"{template.name}; last error: {type(err).__name__}: {err}") from err
                continue
            except BaseException:
                self._return(slot)
                raise
            self.prepare_times.append(time.monotonic() - start)
            return Sandbox(self, slot, template, graded)
        raise AssertionError("unreachable")

    def _take(self, timeout_s: float | None) -> Slot:
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            while not self._free:
                if self._closed:
                    raise RuntimeError("sandbox pool is closed")
                if not self._in_use:
                    raise SandboxInfraError(f"every slot of the sandbox pool {self.dir.name} was retired: "
                                            f"{'; '.join(self.retired[-3:])}")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError(f"no free sandbox slot within {timeout_s}s (pool size {self.size})")
                self._cond.wait(timeout=left)
            slot = self._free.pop()
            self._in_use.add(slot.index)
            return slot

    def _fill(self, slot: Slot, template: Path, graded: bool) -> None:
        self._wipe(slot)
        shutil.copytree(template / "testbed", slot.dir / "testbed", symlinks=True)
        shutil.copytree(template / "testbed" / ".git", slot.dir / ".baseline.git", symlinks=True)
        (slot.dir / "tmp").mkdir()
        (slot.dir / "root").mkdir()
        if slot.uid is not None:
            # graded: the repository stays tandem's, so the tests' process cannot write it
            for sub in ("tmp",) if graded else ("testbed", "tmp"):
                chown_tree(slot.dir / sub, slot.uid)

    def _wipe(self, slot: Slot) -> None:
        if slot.capped:  # a fresh filesystem: nothing the agent built can survive or slow this down
            unmount(slot.dir)
            remove_tree(slot.dir)
            slot.dir.mkdir()
            assert self.disk_cap is not None  # a capped slot comes from a capped pool
            mount_tmpfs(slot.dir, self.disk_cap)
            return
        for sub in ("testbed", "tmp", ".baseline.git", "root"):
            remove_tree(slot.dir / sub)

    def release(self, sandbox: Sandbox) -> None:
        try:
            self._wipe(sandbox.slot)
        except Exception as err:
            self._retire(sandbox.slot, f"cleanup failed: {type(err).__name__}: {err}")
            return
        self._return(sandbox.slot)

    def _retire(self, slot: Slot, why: str) -> None:
        """Take a slot out of service for good and put a new one in its place (if one can be made)."""
        log.warning("sandbox slot %s retired (%s)", slot.dir, why)
        self.retired.append(f"{slot.dir.name}: {why}"[:500])
        try:
            remove_tree(slot.dir)
        except OSError as err:
            log.warning("retired slot %s stays on disk: %s", slot.dir, err)
        replacement = None
        if not self._closed:
            try:
                uid_index = slot.uid - self._uid_base if slot.uid is not None and self._uid_base is not None else 0
                replacement = self._new_slot(uid_index)
            except Exception as err:
                log.warning("no replacement for retired slot %s: %s", slot.dir, err)
        with self._cond:
            self._in_use.discard(slot.index)
            if replacement is not None:
                self._free.append(replacement)
            self._cond.notify_all()

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
        try:
            remove_tree(self.dir)
        except OSError as err:
            log.warning("could not remove sandbox pool %s: %s", self.dir, err)
        lifecycle.LIVE.discard(self)
        if self._cond.acquire(blocking=False):  # never block: this may run inside a signal handler
            try:
                self._cond.notify_all()
            finally:
                self._cond.release()
