"""Network blocking while a cassette replays: only loopback reaches a socket.

vcrpy answers the HTTP clients it patches, but it lets ignored hosts (the Langfuse
endpoint) and every other client through; a forgotten re-record could then call a real
provider. The guard is laid over whatever ``connect`` is in place, so a block already
there (pytest-recording's ``--block-network``) still applies; nested replays share one,
and the outermost puts the previous ``connect`` back. It is ours, not pytest-recording's
guard: importing that imports pytest (≈ 85 ms), which the CLI's ``--replay`` must not pay.
"""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from templiqx_core import Unsupported

__all__ = ["LOOPBACK_HOSTS", "NetworkBlocked", "offline"]

#: Regular expressions (``re.match``) of the hosts a blocked process may still connect to.
LOOPBACK_HOSTS = (r"127(?:\.\d{1,3}){3}$", r"::1$", r"localhost$")
_LOOPBACK = re.compile("|".join(f"(?:{host})" for host in LOOPBACK_HOSTS))

_lock = threading.Lock()
_depth = 0
_previous: tuple[Callable[..., Any], Callable[..., Any]] | None = None


class NetworkBlocked(Unsupported, RuntimeError):
    """A connection elsewhere than loopback while a cassette replays (``TQX_UNSUPPORTED``;
    a ``RuntimeError`` like pytest-recording's own block)."""


def _guard(connect: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(sock: socket.socket, address: Any, *args: Any, **kwargs: Any) -> Any:
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            host = str(address[0])
            if not _LOOPBACK.match(host):
                raise NetworkBlocked(
                    f"Network is disabled for host {host!r} while a cassette replays "
                    "(only loopback connects); record with --record-mode=once"
                )
        return connect(sock, address, *args, **kwargs)

    return guarded


@contextmanager
def offline() -> Iterator[None]:
    """Refuse every non-loopback connection until the outermost ``offline()`` ends."""
    global _depth, _previous
    with _lock:
        if _depth == 0:
            _previous = (socket.socket.connect, socket.socket.connect_ex)
            socket.socket.connect = _guard(_previous[0])  # type: ignore[method-assign]
            socket.socket.connect_ex = _guard(_previous[1])  # type: ignore[method-assign]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _previous is not None:
                socket.socket.connect, socket.socket.connect_ex = _previous  # type: ignore[method-assign]
                _previous = None
