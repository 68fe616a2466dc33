"""A hard wall-clock deadline for one HTTP round trip, enforced at the socket.

httpx timeouts bound each socket operation, not the exchange: a server that trickles
one byte at a time (headers included) keeps every read short and the call alive
forever. This network backend gives every connect, read and write only what is left of
the caller's deadline, and fails the first operation that starts after it has passed.
The deadline lives in a context variable, so one pooled client serves calls with
different deadlines on different threads, and deadlines nest: an outer one (a
``RetryingRuntime``'s) caps every inner one (each attempt's).

A transport's pooled connections belong to the process that opened them: after
``os.fork()`` the child starts with an empty pool (parent and child would otherwise
write to and read from the same keep-alive sockets and receive each other's responses).
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import time
import weakref
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from templiqx_core import Unsupported

__all__ = ["DeadlineTransport", "deadline", "poison_connection"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "templiqx_langfuse_deadline", default=None
)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Socket operations inside the block share one budget of ``seconds``.

    Yields the monotonic instant the block must end by: ``seconds`` from now, or an
    enclosing deadline's instant if that comes first.
    """
    at = time.monotonic() + seconds
    outer = _DEADLINE.get()
    if outer is not None:
        at = min(at, outer)
    token = _DEADLINE.set(at)
    try:
        yield at
    finally:
        _DEADLINE.reset(token)


def _budget(timeout: float | None, error: type[Exception]) -> float | None:
    at = _DEADLINE.get()
    if at is None:
        return timeout
    remaining = at - time.monotonic()
    if remaining <= 0:
        raise error("round-trip deadline exceeded")
    return remaining if timeout is None else min(timeout, remaining)


class _DeadlineStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream) -> None:
        self._inner = inner
        self.poisoned = False

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _budget(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _budget(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        # Closing a descriptor does not wake a thread blocked reading it; shutting the
        # socket down does. ``close()`` on a runtime (on another thread) closes the pool, so
        # a call in flight fails at once instead of waiting for the server to answer.
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        budget = _budget(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, budget))

    def get_extra_info(self, info: str) -> Any:
        # The pool asks an idle connection whether it is readable before reusing it
        # (readable = the server spoke out of turn); a poisoned one always says yes.
        if info == "is_readable" and self.poisoned:
            return True
        return self._inner.get_extra_info(info)


def poison_connection(extensions: Any) -> bool:
    """Make sure the connection a response came on is closed, never reused.

    For responses whose framing leaves stray bytes behind (a 204/304 with a body, bytes
    after the end of a response): reused, the connection would hand those bytes to the
    next call as its response. False when the response did not come through a
    ``DeadlineTransport`` socket (e.g. a cassette replay): there is nothing to reuse.
    """
    stream = extensions.get("network_stream") if isinstance(extensions, dict) else None
    if isinstance(stream, _DeadlineStream):
        stream.poisoned = True
        return True
    return False


class _DeadlineBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend) -> None:
        self._inner = inner

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        budget = _budget(timeout, httpcore.ConnectTimeout)
        stream = self._inner.connect_tcp(host, port, budget, local_address, socket_options)
        return _DeadlineStream(stream)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        budget = _budget(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.connect_unix_socket(path, budget, socket_options))

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


_LIVE: weakref.WeakSet[DeadlineTransport] = weakref.WeakSet()


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport, with the deadline-aware network backend underneath.

    Takes ``httpx.HTTPTransport``'s arguments (``verify``, ``proxy``, ``limits``...). A
    host that passes its own ``http_client`` builds it on this transport, so the
    round-trip deadline and the fork reset hold for it too.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._kwargs = kwargs
        self._wrap_backend()
        _LIVE.add(self)

    def _wrap_backend(self) -> None:
        # httpx exposes no network_backend argument; its httpcore pool (a proxy pool
        # too) keeps the backend it connects with here. tests/reliability proves the
        # deadline holds end to end; should a new httpx/httpcore move it, construction
        # fails loudly, never silently without a deadline.
        pool = getattr(self, "_pool", None)
        backend = getattr(pool, "_network_backend", None)
        if not isinstance(pool, httpcore.ConnectionPool) or not isinstance(
            backend, httpcore.NetworkBackend
        ):
            raise Unsupported(
                f"httpx {httpx.__version__} / httpcore {httpcore.__version__} no longer expose "
                "the connection pool's network backend: the round-trip deadline cannot be "
                "enforced (templiqx-langfuse supports httpx<1)"
            )
        pool._network_backend = _DeadlineBackend(backend)

    def _reset_after_fork(self) -> None:
        """A fresh pool; the parent's connections are dropped, never closed or used.

        Closing them here would be harmless for the parent's sockets (the child only
        closes its copy of each descriptor) but is not needed: they are unreferenced.
        """
        super().__init__(**self._kwargs)
        self._wrap_backend()


def _after_fork_in_child() -> None:
    for transport in list(_LIVE):
        transport._reset_after_fork()


os.register_at_fork(after_in_child=_after_fork_in_child)
