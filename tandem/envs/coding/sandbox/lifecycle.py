"""Process-wide cleanup of sandbox pools and template caches, whatever way the process ends.

Every pool and template cache registers here. atexit always removes them; SIGTERM/SIGHUP
do too where nobody else installed a handler (the launcher may own them). A process that
is SIGKILLed leaves directories named pool-<pid>-*; the next pool started in the same
root sweeps them (and detaches any slot tmpfs they left mounted).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import weakref
from pathlib import Path

from tandem.envs.coding.sandbox.storage import remove_tree

log = logging.getLogger(__name__)

LIVE: "weakref.WeakSet" = weakref.WeakSet()
"""Pools and template caches to remove at exit."""
_HANDLERS_INSTALLED = False


def _cleanup_all() -> None:
    for owner in list(LIVE):
        owner.close()


def _on_signal(signum, frame) -> None:
    _cleanup_all()
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def install_cleanup_hooks() -> None:
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


def sweep_stale(root: Path) -> None:
    """Remove pool directories left by processes that died without cleaning up (SIGKILL)."""
    if not root.exists():
        return
    for d in root.glob("pool-*"):
        try:
            pid = int(d.name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if pid != os.getpid() and not Path(f"/proc/{pid}").exists():
            try:
                remove_tree(d)
            except OSError as err:  # never block start-up on a leftover; say where it is
                log.warning("could not remove the stale sandbox pool %s: %s", d, err)
