"""A hard wall-clock deadline for one HTTP round trip, enforced at the socket.

httpx timeouts bound each socket operation, not the exchange: a server that trickles
one byte at a time (headers included) keeps every read short and the call alive
forever. This network backend gives every connect, read and write only what is left of
the caller's deadline, and fails the first operation that starts after it has passed.
The deadline lives in a context variable, so one pooled client serves calls with
different deadlines on different threads.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import httpcore
import httpx

from templiqx_core import Unsupported

__all__ = ["DeadlineTransport", "deadline"]

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "templiqx_langfuse_deadline", default=None
)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Socket operations inside the block share one budget of ``seconds``."""
    at = time.monotonic() + seconds
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

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._inner.read(max_bytes, _budget(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, _budget(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        budget = _budget(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, budget))

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


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


class DeadlineTransport(httpx.HTTPTransport):
    """httpx's own transport, with the deadline-aware network backend underneath."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        # httpx exposes no network_backend argument; its httpcore pool keeps the backend
        # it connects with here. tests/reliability proves the deadline holds end to end;
        # should a new httpx/httpcore move it, construction fails loudly, never silently
        # without a deadline.
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
