"""Loopback ports: every process tandem starts binds 127.0.0.1 only."""

from __future__ import annotations

import socket


_handed_out: set[int] = set()
"""Ports this process already gave someone: free now is not free for long, because the child
given a port binds it seconds later, and the kernel may offer the same port again meanwhile (the
router's own port and its Prometheus port once came out equal, and the router died)."""


def free_port() -> int:
    """A port nothing listens on right now, on 127.0.0.1, never one this process handed out before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
