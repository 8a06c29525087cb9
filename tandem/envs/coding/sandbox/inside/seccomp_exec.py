"""Inside an unshare sandbox: install tandem's seccomp filter, then exec the command.

    python -I -S seccomp_exec.py <program as hex> <command> [args...]

Runs under the sandbox's interpreter, after setpriv has dropped every privilege and set
no_new_privs (which lets an unprivileged process load a filter). Standard library only;
a failure to install the filter refuses the command instead of running it unfiltered.
See tandem/envs/coding/sandbox/seccomp.py for what the filter refuses.
"""

import ctypes
import os
import signal
import sys

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2


class SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def main() -> None:
    program = bytes.fromhex(sys.argv[1])
    buf = ctypes.create_string_buffer(program, len(program))
    fprog = SockFprog(len(program) // 8, ctypes.addressof(buf))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(fprog), 0, 0) != 0:
        sys.exit(f"tandem sandbox: cannot install the seccomp filter: {os.strerror(ctypes.get_errno())}")
    # CPython ignores SIGPIPE and SIGXFSZ, and an ignored signal survives exec: give the command
    # the defaults it would have had (`yes | head` ends quietly, RLIMIT_FSIZE kills).
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    os.execvp(sys.argv[2], sys.argv[2:])


if __name__ == "__main__":
    main()
