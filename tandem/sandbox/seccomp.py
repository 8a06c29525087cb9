"""The seccomp filter every sandboxed command runs under (both backends, with or without root).

It refuses two things no repository's tests need, each a way out of the sandbox:

    add_key, request_key, keyctl        -> EPERM: kernel keyrings belong to a uid, not to a
                                           namespace, and outlive the sandbox; a key with open
                                           permissions carries data (the hidden tests) from a
                                           grading sandbox to any later rollout
    unshare(flags) / clone(flags, ...)  -> EPERM when flags hold CLONE_NEWUSER: a new user
      with CLONE_NEWUSER                   namespace hands its creator every capability over
                                           fresh namespaces (kernel surface, the first step of
                                           most container escapes). bwrap without root also
                                           has --disable-userns; as root that option is not
                                           available, and this is what stops it
    clone3(...)                         -> ENOSYS: its flags live in memory a filter cannot
                                           read; libc then falls back to clone
    a syscall of a foreign ABI          -> EPERM (i386 or x32 entry points on x86_64)
    anything else                       -> allowed

bwrap loads it with --seccomp FD. util-linux's setpriv cannot (before 2.40), so the unshare
backend runs tandem/sandbox/inside/seccomp_exec.py (stdlib only) as the last step before the
command: it installs the filter (no_new_privs is already set) and execs the command.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000
_ARCHES = {  # machine: AUDIT_ARCH_*, then syscall numbers
    "x86_64": (0xC000003E, {"unshare": 272, "clone": 56, "clone3": 435, "add_key": 248, "request_key": 249,
                            "keyctl": 250}),
    "aarch64": (0xC00000B7, {"unshare": 97, "clone": 220, "clone3": 435, "add_key": 217, "request_key": 218,
                             "keyctl": 219}),
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


def program() -> bytes:
    arch, nr = _ARCHES[platform.machine()]
    return _assemble([
        (None, _LD_W_ABS, 4, None, None),                      # seccomp_data.arch
        (None, _JEQ, arch, "native", "eperm"),
        ("native", _LD_W_ABS, 0, None, None),                  # seccomp_data.nr
        (None, _JGE, _X32_BIT, "eperm", None),
        (None, _JEQ, nr["clone3"], "enosys", None),
        (None, _JEQ, nr["add_key"], "eperm", None),
        (None, _JEQ, nr["request_key"], "eperm", None),
        (None, _JEQ, nr["keyctl"], "eperm", None),
        (None, _JEQ, nr["unshare"], "flags", None),
        (None, _JEQ, nr["clone"], "flags", "allow"),
        ("flags", _LD_W_ABS, 16, None, None),                  # low 32 bits of args[0]
        (None, _JSET, CLONE_NEWUSER, "eperm", "allow"),
        ("allow", _RET, _ALLOW, None, None),
        ("eperm", _RET, _ERRNO | errno.EPERM, None, None),
        ("enosys", _RET, _ERRNO | errno.ENOSYS, None, None),
    ])


def program_fd() -> int:
    """A pipe read end holding the program, for one bwrap run (it reads to EOF); the caller passes and closes it."""
    data = program()
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # 120 bytes: always fits in the pipe buffer
    finally:
        os.close(write_end)
    return read_end
