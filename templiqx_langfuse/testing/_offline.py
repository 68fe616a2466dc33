"""Network blocking while a cassette replays: only loopback reaches a socket.

vcrpy answers the HTTP clients it patches, but it lets ignored hosts (the Langfuse
endpoint) and every other client through; a forgotten re-record could then call a real
provider. This reuses pytest-recording's own guard (``--block-network``), which patches
``socket.socket.connect``/``connect_ex``, with loopback as the only allowed hosts, and
counts nested replays so the last one to end lifts the block. A block someone else put
in place (pytest-recording's ``--block-network``) is left alone.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from pytest_recording import network

__all__ = ["LOOPBACK_HOSTS", "offline"]

#: Regular expressions (``re.match``) of the hosts a blocked process may still connect to.
LOOPBACK_HOSTS = (r"127(?:\.\d{1,3}){3}$", r"::1$", r"localhost$")

_lock = threading.Lock()
_depth = 0
_ours = False


@contextmanager
def offline() -> Iterator[None]:
    """Refuse every non-loopback connection until the outermost ``offline()`` ends."""
    global _depth, _ours
    with _lock:
        if _depth == 0:
            _ours = socket.socket.connect is network._original_connect
            if _ours:
                network.block(allowed_hosts=list(LOOPBACK_HOSTS))
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _ours:
                network.unblock()
                _ours = False
