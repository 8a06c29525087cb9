"""The seccomp filter every sandboxed command runs under (both backends, with or without root).

It refuses what no repository's tests need and what would let one sandbox reach another,
or the host, through state they share:

    add_key, request_key, keyctl        -> EPERM: kernel keyrings belong to a uid, not to a
                                           namespace, and outlive the sandbox
    unshare / clone with CLONE_NEWUSER  -> EPERM: a new user namespace hands its creator every
                                           capability over fresh namespaces (kernel surface)
    clone3(...)                         -> ENOSYS: its flags live in memory a filter cannot
                                           read; libc then falls back to clone
    flock; fcntl F_SETLK, F_SETLKW,     -> 0, and nothing is locked: a lock on a file every
      F_OFD_SETLK, F_OFD_SETLKW            sandbox can open read-only (/etc/passwd, /dev/null,
                                           the Python prefix) is a signal between concurrent
                                           sandboxes; a lock here locks nothing, so none is
                                           seen (sqlite and the like still run, unlocked)
    fcntl F_SETLEASE, F_NOTIFY          -> EPERM: told when another process opens a shared file
    inotify_init(1), inotify_add_watch, -> ENOSYS: the same signal through file events
      fanotify_init                        (watchers fall back to polling their own files)
    io_uring_setup/enter/register       -> ENOSYS: its operations run without passing this filter
    socket(AF_UNIX, ...)                -> EPERM: connecting to a host socket file needs no write
                                           to its read-only mount; socketpair() stays allowed
                                           (asyncio and multiprocessing pipes use it)
    memfd_create, memfd_secret, shmget  -> EPERM unless the sandbox's memory is counted by a
                                           cgroup (count_memory): without one, memory held this
                                           way escapes every rlimit
    a syscall of a foreign ABI          -> EPERM (i386 or x32 entry points on x86_64)
    anything else                       -> allowed

bwrap loads it with --seccomp FD. util-linux's setpriv cannot (before 2.40), so the unshare
backend runs tandem/envs/coding/sandbox/inside/seccomp_exec.py (stdlib only) as the last step before the
command: it installs the filter (no_new_privs is already set) and execs the command.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000
AF_UNIX = 1
F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW, F_SETLEASE, F_NOTIFY = 6, 7, 37, 38, 1024, 1026
_ARCHES = {  # machine: AUDIT_ARCH_*, then syscall numbers
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435, "add_key": 248, "request_key": 249,
                            "keyctl": 250, "flock": 73, "fcntl": 72, "inotify_init": 253, "inotify_init1": 294,
                            "inotify_add_watch": 254, "fanotify_init": 300, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427, "socket": 41, "memfd_create": 319,
                            "memfd_secret": 447, "shmget": 29}),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435, "add_key": 217, "request_key": 218,
                             "keyctl": 219, "flock": 32, "fcntl": 25, "inotify_init1": 26, "inotify_add_watch": 27,
                             "fanotify_init": 262, "io_uring_setup": 425, "io_uring_enter": 426,
                             "io_uring_register": 427, "socket": 198, "memfd_create": 279, "memfd_secret": 447,
                             "shmget": 194}),
}
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000


def supported() -> bool:
    return platform.machine() in _ARCHES


def syscall_number(name: str) -> int:
    return _ARCHES[platform.machine()][1][name]


def _assemble(program: list[tuple]) -> bytes:
    """(label | None, opcode, k, jump-if-true label, jump-if-false label) -> struct sock_filter[]."""
    where = {ins[0]: i for i, ins in enumerate(program) if ins[0]}
    out = []
    for i, (_, code, k, jt, jf) in enumerate(program):
        offset = (lambda label: 0 if label is None else where[label] - i - 1)
        out.append(struct.pack("=HBBI", code, offset(jt), offset(jf), k))
    return b"".join(out)


def program(count_memory: bool = False) -> bytes:
    """The filter; count_memory: a cgroup bounds the sandbox's memory, so memfd and SysV shm may stay."""
    arch, nr = _ARCHES[platform.machine()]
    refused = ["add_key", "request_key", "keyctl"]
    hidden = ["clone3", "inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "io_uring_setup",
              "io_uring_enter", "io_uring_register"]
    if not count_memory:
        refused += ["memfd_create", "memfd_secret", "shmget"]
    else:
        refused += ["memfd_secret"]  # its pages are unevictable and not charged like others
    code = [(None, _LD_W_ABS, 4, None, None),                  # seccomp_data.arch
            (None, _JEQ, arch, "native", "eperm"),
            ("native", _LD_W_ABS, 0, None, None),              # seccomp_data.nr
            (None, _JGE, _X32_BIT, "eperm", None)]
    code += [(None, _JEQ, nr[name], "enosys", None) for name in hidden if name in nr]
    code += [(None, _JEQ, nr[name], "eperm", None) for name in refused if name in nr]
    code += [(None, _JEQ, nr["flock"], "nolock", None),
             (None, _JEQ, nr["fcntl"], "fcntl", None),
             (None, _JEQ, nr["socket"], "socket", None),
             (None, _JEQ, nr["unshare"], "flags", None),
             (None, _JEQ, nr["clone"], "flags", "allow"),
             ("flags", _LD_W_ABS, 16, None, None),             # low 32 bits of args[0]
             (None, _JSET, CLONE_NEWUSER, "eperm", "allow"),
             ("socket", _LD_W_ABS, 16, None, None),            # args[0]: the address family
             (None, _JEQ, AF_UNIX, "eperm", "allow"),
             ("fcntl", _LD_W_ABS, 24, None, None)]             # args[1]: the command
    code += [(None, _JEQ, cmd, "nolock", None) for cmd in (F_SETLK, F_SETLKW, F_OFD_SETLK)]
    code += [(None, _JEQ, F_OFD_SETLKW, "nolock", None),
             (None, _JEQ, F_SETLEASE, "eperm", None),
             (None, _JEQ, F_NOTIFY, "eperm", "allow"),
             ("allow", _RET, _ALLOW, None, None),
             ("eperm", _RET, _ERRNO | errno.EPERM, None, None),
             ("enosys", _RET, _ERRNO | errno.ENOSYS, None, None),
             ("nolock", _RET, _ERRNO | 0, None, None)]         # errno 0: the call returns 0, locking nothing
    return _assemble(code)


def program_fd(count_memory: bool = False) -> int:
    """A pipe read end holding the program, for one bwrap run (it reads to EOF); the caller passes and closes it."""
    data = program(count_memory)
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # a few hundred bytes: always fits in the pipe buffer
    finally:
        os.close(write_end)
    return read_end
