"""Slot storage: a hard disk cap per sandbox, and removal that no tree can defeat.

**The cap.** When tandem runs as root, every slot directory is its own tmpfs mounted
with `size=` and `nr_inodes=`. The kernel then refuses a write at the moment the slot
would pass either bound, so nothing slips past it: bytes written and deleted inside one
command count while they exist, empty files spend inodes, and a sparse file spends the
pages it really fills (which is what bounds a diff's zero-filled file when grading
materializes it). Usage is read with one statvfs call. Without root nothing can be
mounted on the host; the pool then measures each slot after every command (a soft
cap, see SandboxPool) and says so at start-up.

The cost of a tmpfs cap is memory: a slot's pages live in RAM (and swap), so the
worst case is slots x max_workdir_mb. `check_memory_budget` warns when that exceeds
half of the machine's memory.

**Removal.** `remove_tree` empties a tree without recursion and with O(1) open file
descriptors: it walks down with openat() and back up through "..", so a 100,000-deep
tree, a path longer than PATH_MAX or a directory chmod-ed to 000 costs time, never a
RecursionError. Mounts below the tree are detached first.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

MS_NOSUID, MS_NODEV = 2, 4
MNT_DETACH = 2
# libc's symbols are the process's own: find_library("c") would run ldconfig at import time.
_libc = ctypes.CDLL(None, use_errno=True)
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class DiskCap:
    max_bytes: int
    max_inodes: int

    @classmethod
    def from_config(cls, sc) -> "DiskCap":
        return cls(sc.max_workdir_mb * 1024 * 1024, sc.max_inodes)


def mount_tmpfs(path: Path, cap: DiskCap) -> None:
    """Mount a fresh capped tmpfs on `path` (root only); nosuid, nodev."""
    opts = f"size={cap.max_bytes},nr_inodes={cap.max_inodes},mode=0755".encode()
    if _libc.mount(b"tandem-slot", os.fsencode(str(path)), b"tmpfs", MS_NOSUID | MS_NODEV, opts) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"cannot mount a tmpfs on {path}: {os.strerror(err)}")


def unmount(path: Path | str) -> None:
    """Detach the mount at `path` (lazily: a process still holding it keeps it alive, not us)."""
    if _libc.umount2(os.fsencode(str(path)), MNT_DETACH) != 0:
        err = ctypes.get_errno()
        if err not in (22, 2):  # EINVAL: not a mount point; ENOENT: gone already
            raise OSError(err, f"cannot unmount {path}: {os.strerror(err)}")


def mounts_under(root: Path | str) -> list[str]:
    """Mount points at or below `root`, deepest first (from /proc/self/mountinfo)."""
    base = os.path.abspath(str(root))
    found = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 5:
            continue
        point = _unescape(fields[4])
        if point == base or point.startswith(base + os.sep):
            found.append(point)
    return sorted(set(found), key=len, reverse=True)


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as \\ooo octal escapes."""
    return field.encode().decode("unicode_escape").encode("latin-1").decode(errors="surrogateescape")


_TMPFS_OK: dict[str, bool] = {}


def tmpfs_available(probe_dir: Path) -> bool:
    """Can this process mount a capped tmpfs here? (root with CAP_SYS_ADMIN; cached)."""
    if os.geteuid() != 0:
        return False
    if "ok" not in _TMPFS_OK:
        probe = probe_dir / f".tandem-mount-probe-{os.getpid()}"
        probe.mkdir(parents=True, exist_ok=True)
        try:
            mount_tmpfs(probe, DiskCap(1024 * 1024, 64))
            unmount(probe)
            _TMPFS_OK["ok"] = True
        except OSError as err:
            log.warning("sandbox disk cap: tmpfs cannot be mounted here (%s); slots are measured instead", err)
            _TMPFS_OK["ok"] = False
        finally:
            try:
                probe.rmdir()
            except OSError:
                pass
    return _TMPFS_OK["ok"]


def usage(path: Path) -> tuple[int, int]:
    """(bytes, inodes) in use on the filesystem holding `path`."""
    st = os.statvfs(path)
    return (st.f_blocks - st.f_bfree) * st.f_frsize, st.f_files - st.f_ffree


def check_memory_budget(slots: int, cap: DiskCap) -> None:
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return
    worst = slots * cap.max_bytes
    if worst > total // 2:
        log.warning("sandbox disk caps are tmpfs (RAM): %d slots x %d MiB = %.1f GiB may be filled, more than half "
                    "of this machine's %.1f GiB; lower sandbox.max_workdir_mb or the pool size", slots,
                    cap.max_bytes >> 20, worst / 2**30, total / 2**30)


# ----------------------------------------------------------------------------- removal
def remove_tree(path: Path | str) -> None:
    """Remove `path` (file, link or directory tree) whatever its depth, width or modes."""
    path = os.path.abspath(str(path))
    for point in mounts_under(path):
        unmount(point)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        return
    _make_traversable(path, None, st)
    fd = os.open(path, _DIR_FLAGS)
    try:
        _empty(fd)
    finally:
        os.close(fd)
    os.rmdir(path)


def _make_traversable(name: str, dir_fd: int | None, st: os.stat_result) -> None:
    if (st.st_mode & 0o700) != 0o700:
        os.chmod(name, stat.S_IMODE(st.st_mode) | 0o700, dir_fd=dir_fd)


def _empty(top: int) -> None:
    """Delete everything below the directory `top` (which stays open and in place)."""
    cur = os.dup(top)
    depth = 0
    try:
        while True:
            child = _clear_level(cur)
            if child is not None:  # a non-empty subdirectory: go down into it
                os.close(cur)
                cur, depth = child, depth + 1
                continue
            if depth == 0:
                return
            parent = os.open("..", _DIR_FLAGS, dir_fd=cur)  # emptied: back up, its rmdir happens there
            os.close(cur)
            cur, depth = parent, depth - 1
    finally:
        os.close(cur)


def _clear_level(cur: int) -> int | None:
    """Unlink files and empty subdirectories of `cur`; return an fd of the first non-empty one."""
    _make_traversable_fd(cur)
    with os.scandir(cur) as entries:
        names = [(e.name, e.is_dir(follow_symlinks=False)) for e in entries]
    for name, is_dir in names:
        if not is_dir:
            _ignore_missing(os.unlink, name, dir_fd=cur)
            continue
        try:
            os.rmdir(name, dir_fd=cur)
            continue
        except FileNotFoundError:
            continue
        except OSError as err:
            if err.errno not in (39, 13):  # ENOTEMPTY, EACCES: descend and empty it
                raise
        _make_traversable(name, cur, os.stat(name, dir_fd=cur, follow_symlinks=False))
        return os.open(name, _DIR_FLAGS, dir_fd=cur)
    return None


def _make_traversable_fd(fd: int) -> None:
    st = os.fstat(fd)
    if (st.st_mode & 0o700) != 0o700:
        os.fchmod(fd, stat.S_IMODE(st.st_mode) | 0o700)


def _ignore_missing(func, *args, **kw) -> None:
    try:
        func(*args, **kw)
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------------------- walking
def make_owner_accessible(root: Path) -> None:
    """Give the owner read access to everything the agent chmod-ed away (git must read the tree)."""
    for path, st in walk_tree(root):
        try:
            if stat.S_ISDIR(st.st_mode) and (st.st_mode & 0o700) != 0o700:
                os.chmod(path, st.st_mode | 0o700)
            elif stat.S_ISREG(st.st_mode) and not st.st_mode & 0o400:
                os.chmod(path, st.st_mode | 0o600)
        except OSError:
            pass


def walk_tree(root: Path):
    """(path, lstat) of every entry below root, breadth-first, without recursion; never follows links.

    A directory is listed after it was yielded, so a caller may chmod it on the way."""
    queue = [str(root)]
    while queue:
        d = queue.pop()
        try:
            with os.scandir(d) as it:
                entries = [(e.path, e.is_dir(follow_symlinks=False)) for e in it]
        except OSError:
            continue
        for path, is_dir in entries:
            try:
                st = os.lstat(path)
            except OSError:
                continue
            yield path, st
            if is_dir:
                queue.append(path)


def chown_tree(root: Path, uid: int) -> None:
    os.chown(root, uid, uid, follow_symlinks=False)
    for path, _ in walk_tree(root):
        os.chown(path, uid, uid, follow_symlinks=False)
