"""A memory cgroup per sandboxed command, where this process may make one (root, a writable hierarchy).

RLIMIT_AS bounds each process's mappings, not what the sandbox holds: pages of a memfd
or SysV segment no longer mapped, tmpfs files, many processes each under the limit. A
memory cgroup counts all of them (anonymous memory, shmem and tmpfs pages, page cache,
kernel memory such as inodes) against one bound, sandbox.memory_mb, and the kernel's OOM
killer ends the command when it passes it.

Each command gets a fresh child cgroup of this process's own, made before the command
starts; the command's first process (a shell on the host) moves itself in, then execs the
sandbox. cgroup v2 (memory.max, memory.swap.max = 0) is used where its memory controller
can be enabled below this process's cgroup; else cgroup v1 (memory.limit_in_bytes and, with
swap accounting, memory.memsw.limit_in_bytes). Without either (not root, a read-only
/sys/fs/cgroup) there is no cgroup, and the seccomp filter refuses memfd and SysV shared
memory instead (tandem.envs.coding.sandbox.seccomp).
"""

from __future__ import annotations

import itertools
import logging
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)
_SEQ = itertools.count()
_DETECTED: dict[str, "MemoryCgroups | None"] = {}


@dataclass(frozen=True)
class MemoryCgroups:
    base: Path
    """This process's own cgroup directory (v2) or its memory cgroup directory (v1)."""
    version: int

    @classmethod
    def detect(cls) -> "MemoryCgroups | None":
        """The first hierarchy where a child with a memory limit can be made here; None where none can (cached)."""
        if "found" not in _DETECTED:
            _DETECTED["found"] = None
            for found in (_v2_base(), _v1_base()) if os.geteuid() == 0 else ():
                if found is not None and cls(*found).probe():
                    _DETECTED["found"] = cls(*found)
                    break
        return _DETECTED["found"]

    def probe(self) -> bool:
        try:
            child = self.create("probe", 64 << 20)
        except OSError as err:
            log.info("memory cgroup v%d at %s not usable: %s", self.version, self.base, err)
            return False
        self.remove(child)
        return True

    def create(self, name: str, limit_bytes: int) -> Path:
        """A fresh child cgroup holding at most limit_bytes of memory (no swap)."""
        child = self.base / f"tandem-{os.getpid()}-{name}-{next(_SEQ)}"
        child.mkdir()
        try:
            if self.version == 2:
                (child / "memory.max").write_text(str(limit_bytes))
                _write_if_present(child / "memory.swap.max", "0")
                _write_if_present(child / "memory.oom.group", "1")
            else:
                (child / "memory.limit_in_bytes").write_text(str(limit_bytes))
                _write_if_present(child / "memory.memsw.limit_in_bytes", str(limit_bytes))
        except OSError:
            self.remove(child)
            raise
        return child

    @staticmethod
    def enter_argv(child: Path, argv: list[str]) -> list[str]:
        """argv preceded by a host shell that moves itself into `child`, then execs it."""
        return ["sh", "-c", 'echo $$ > "$1" && shift && exec "$@"', "sh", str(child / "cgroup.procs"), *argv]

    def remove(self, child: Path) -> None:
        """Kill whatever is left in the cgroup and remove it (its charges go to the parent)."""
        for attempt in range(50):
            try:
                child.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                for pid in _pids(child):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02 * (attempt + 1))
        log.warning("memory cgroup %s could not be removed", child)

    def peak_bytes(self, child: Path) -> int:
        """Most memory the cgroup held (0 where the kernel does not say)."""
        for name in ("memory.peak", "memory.max_usage_in_bytes"):
            try:
                return int((child / name).read_text().strip())
            except (OSError, ValueError):
                continue
        return 0


def _write_if_present(path: Path, value: str) -> None:
    if path.exists():
        path.write_text(value)


def _pids(child: Path) -> list[int]:
    try:
        return [int(p) for p in (child / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _own_cgroups() -> dict[str, str]:
    """controller (or '' for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _mounts(fstype: str) -> list[tuple[str, str]]:
    """(mount point, super options) of every mount of `fstype`."""
    found: list[tuple[str, str]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return found
    for line in lines:
        pre, _, post = line.partition(" - ")
        fields, rest = pre.split(), post.split()
        if len(fields) >= 5 and len(rest) >= 3 and rest[0] == fstype:
            found.append((fields[4], rest[2]))
    return found


def _v2_base() -> tuple[Path, int] | None:
    path = _own_cgroups().get("")
    for point, _ in _mounts("cgroup2"):
        base = Path(point) / (path or "/").lstrip("/")
        try:
            if "memory" not in (base / "cgroup.controllers").read_text().split():
                continue
            if "memory" not in (base / "cgroup.subtree_control").read_text().split():
                (base / "cgroup.subtree_control").write_text("+memory")
        except OSError:  # e.g. EBUSY: this cgroup holds processes and is not the root
            continue
        return base, 2
    return None


def _v1_base() -> tuple[Path, int] | None:
    path = _own_cgroups().get("memory")
    if path is None:
        return None
    for point, options in _mounts("cgroup"):
        if "memory" in options.split(","):
            base = Path(point) / path.lstrip("/")
            if base.is_dir():
                return base, 1
    return None
