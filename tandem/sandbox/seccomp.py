"""A seccomp filter that refuses new user namespaces, for bwrap when tandem runs as root.

Without root, bwrap's --disable-userns keeps the agent from creating user namespaces
(each one would hand it a full capability set over fresh namespaces: more kernel
surface, and the first step of most container escapes). That option needs
--unshare-user, which a root bwrap cannot combine with the per-slot uid, so as root
bwrap gets this classic-BPF program through --seccomp instead (as Flatpak does):

    unshare(flags) and clone(flags, ...) with CLONE_NEWUSER  -> EPERM
    clone3(...)  -> ENOSYS (its flags live in memory a filter cannot read; libc falls back to clone)
    any syscall of a foreign ABI (i386, x32 on x86_64)        -> EPERM
    everything else                                            -> allowed

The unshare backend needs none of this: its command runs chrooted, and the kernel
refuses CLONE_NEWUSER to a chrooted process.
"""

from __future__ import annotations

import errno
import os
import platform
import struct

CLONE_NEWUSER = 0x10000000
_ARCHES = {  # machine: (AUDIT_ARCH_*, unshare, clone, clone3)
    "x86_64": (0xC000003E, 272, 56, 435),
    "aarch64": (0xC00000B7, 97, 220, 435),
}
_LD_W_ABS, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_ALLOW = 0x7FFF0000
_ERRNO = 0x00050000
_X32_BIT = 0x40000000


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("=HBBI", code, jt, jf, k)


def supported() -> bool:
    return platform.machine() in _ARCHES


def no_userns_program() -> bytes:
    """The filter as struct sock_filter[] (what bwrap --seccomp reads)."""
    arch, unshare, clone, clone3 = _ARCHES[platform.machine()]
    eperm, enosys = _ERRNO | errno.EPERM, _ERRNO | errno.ENOSYS
    program = [  # jump offsets count from the next instruction
        _insn(_LD_W_ABS, 4),                # 0: seccomp_data.arch
        _insn(_JEQ, arch, 1, 0),            # 1: native ABI -> 3, else 2
        _insn(_RET, eperm),                 # 2: foreign ABI
        _insn(_LD_W_ABS, 0),                # 3: seccomp_data.nr
        _insn(_JGE, _X32_BIT, 7, 0),        # 4: x32 -> 12
        _insn(_JEQ, clone3, 7, 0),          # 5: clone3 -> 13
        _insn(_JEQ, unshare, 2, 0),         # 6: unshare -> 9
        _insn(_JEQ, clone, 1, 0),           # 7: clone -> 9
        _insn(_RET, _ALLOW),                # 8: anything else
        _insn(_LD_W_ABS, 16),               # 9: low 32 bits of args[0] (the flags)
        _insn(_JSET, CLONE_NEWUSER, 1, 0),  # 10: CLONE_NEWUSER -> 12, else 11
        _insn(_RET, _ALLOW),                # 11
        _insn(_RET, eperm),                 # 12
        _insn(_RET, enosys),                # 13
    ]
    return b"".join(program)


def program_fd() -> int:
    """A pipe read end holding the program, for one bwrap run (it reads to EOF); caller passes and closes it."""
    data = no_userns_program()
    read_end, write_end = os.pipe()
    try:
        os.write(write_end, data)  # 112 bytes: always fits in the pipe buffer
    finally:
        os.close(write_end)
    return read_end
