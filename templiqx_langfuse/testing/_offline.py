"""Only loopback connects while a cassette replays: vcrpy lets ignored hosts and unpatched
clients through. pytest-recording's guard would import pytest (≈ 85 ms the CLI's
``--replay`` must not pay); a host's ``--block-network`` still applies beneath this one."""

from __future__ import annotations

import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from templiqx_core import Unsupported

__all__ = ["NetworkBlocked", "offline"]

_LOOPBACK = re.compile(r"127(?:\.\d{1,3}){3}$|::1$|localhost$")
_lock = threading.Lock()
_depth = 0
_previous: tuple[Callable[..., Any], Callable[..., Any]]  # set by the outermost offline()


class NetworkBlocked(Unsupported, RuntimeError):
    """A non-loopback connection while a cassette replays (a ``RuntimeError`` like
    pytest-recording's own block)."""


def _guard(connect: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(sock: socket.socket, address: Any, *args: Any, **kwargs: Any) -> Any:
        inet = sock.family in (socket.AF_INET, socket.AF_INET6)
        if inet and not _LOOPBACK.match(host := str(address[0])):
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
            socket.socket.connect, socket.socket.connect_ex = map(_guard, _previous)  # type: ignore[method-assign]
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                socket.socket.connect, socket.socket.connect_ex = _previous  # type: ignore[method-assign]
