"""Bounded httpx transports: one wall-clock deadline per round trip, enforced at the socket.

httpx timeouts bound each socket operation, not the exchange: a server trickling one byte
at a time keeps the call alive forever. Here httpcore2 pools (httpcore 1's are quadratic
in calls in flight) run on a backend giving every connect, read and write what is left of
the deadline, a context variable (an outer one, a retry loop's, caps inner ones).

Only the socket layer sees bytes past a response's end, or a body on a status that has
none (the connection is never reused: they would become the next call's response), or a
close mid-response (worth a retry). A forked child starts with empty pools.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import socket
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import h11
import httpcore2
import httpx

from templiqx_core import InvalidData

if TYPE_CHECKING:
    import asyncio

_DEADLINE: contextvars.ContextVar[float | None] = contextvars.ContextVar(
    "templiqx_langfuse_deadline", default=None
)


@contextmanager
def deadline(seconds: float) -> Iterator[float]:
    """Socket operations inside share one budget; yields ``deadline_at(seconds)``."""
    token = _DEADLINE.set(at := deadline_at(seconds))
    try:
        yield at
    finally:
        _DEADLINE.reset(token)


def deadline_at(seconds: float) -> float:
    """The instant a call of ``seconds`` must end by, under any enclosing deadline."""
    at = time.monotonic() + seconds
    outer = _DEADLINE.get()
    return at if outer is None else min(at, outer)


def _budget(timeout: float | None, error: type[Exception]) -> float | None:
    at = _DEADLINE.get()
    if at is None:
        return timeout
    remaining = at - time.monotonic()
    if remaining <= 0:
        raise error("round-trip deadline exceeded")
    return remaining if timeout is None else min(timeout, remaining)


# Statuses that never carry a body (RFC 9110), and interim ones: bytes after their
# headers would be read by the next call on the connection as its own response.
_NO_BODY = frozenset({204, 304})


class _Wire:
    """What a connection's socket delivered since the request was written, whether the
    server closed, and whether the connection is poisoned."""

    __slots__ = ("_chunks", "_reading", "_size", "eof", "poisoned")

    def __init__(self) -> None:
        self._chunks: list[bytes] = []
        self._size = 0
        self._reading = False
        self.eof = False
        self.poisoned = False

    def sending(self) -> None:
        if self._reading:  # a new request on a kept-alive connection
            self._chunks, self._size, self._reading = [], 0, False
        _EXCHANGE_WIRE.set(self)

    def received(self, data: bytes) -> None:
        self._reading = True
        if data:
            self._chunks.append(data)
            self._size += len(data)
        else:
            self.eof = True

    def overran(self, method: bytes, headers: list[tuple[bytes, bytes]]) -> bool:
        """Whether bytes were read past the end of the response just completed (httpcore2
        keeps them where no public API shows them): by arithmetic, else by h11."""
        chunks, size = self._chunks, self._size
        self._chunks, self._size = [], 0
        length = _content_length(headers)
        first = chunks[0] if chunks else b""
        end = first.find(b"\r\n\r\n")
        if (
            length is not None
            and end > 0
            and first[9:10] != b"1"  # not an interim (1xx) response first
            and first.find(b"\n\n", 0, end) < 0
            and first.find(b"\n\r\n", 0, end) < 0
        ):
            return size > end + 4 + length
        parser = h11.Connection(h11.CLIENT)
        parser.send(h11.Request(method=method, target="/", headers=[("host", "-")]))
        parser.send(h11.EndOfMessage())
        try:
            parser.receive_data(b"".join(chunks))
            event = parser.next_event()
            while event is not h11.NEED_DATA and not isinstance(event, h11.EndOfMessage):
                event = parser.next_event()
        except h11.ProtocolError:
            return False  # httpcore2 parsed it; a disagreement is not an overrun
        return bool(parser.trailing_data[0])


def _content_length(headers: list[tuple[bytes, bytes]]) -> int | None:
    """The one ``Content-Length`` of a response without ``Transfer-Encoding``, else None."""
    length: int | None = None
    for name, value in headers:
        lowered = name.lower()
        if lowered == b"transfer-encoding":
            return None
        if lowered == b"content-length":
            if length is not None or not value.strip().isdigit():
                return None
            length = int(value)
    return length


#: The wire the current call last wrote to: tells a connection cut short from non-HTTP.
_EXCHANGE_WIRE: contextvars.ContextVar[_Wire | None] = contextvars.ContextVar(
    "templiqx_langfuse_exchange_wire", default=None
)

_Stream = TypeVar("_Stream", httpcore2.NetworkStream, httpcore2.AsyncNetworkStream)


class _Watched(Generic[_Stream]):
    """Both layers' stream wrappers: the wire, and a poisoned connection reads as
    "readable" (the server spoke out of turn) when the pool asks before reusing it."""

    def __init__(self, inner: _Stream) -> None:
        self._inner: _Stream = inner
        self.wire = _Wire()

    def get_extra_info(self, info: str) -> Any:
        if info == "is_readable" and self.wire.poisoned:
            return True
        return self._inner.get_extra_info(info)


class _DeadlineStream(_Watched[httpcore2.NetworkStream], httpcore2.NetworkStream):
    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = self._inner.read(max_bytes, _budget(timeout, httpcore2.ReadTimeout))
        self.wire.received(data)
        return data

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.wire.sending()
        self._inner.write(buffer, _budget(timeout, httpcore2.WriteTimeout))

    def close(self) -> None:
        # Shutting a socket down wakes a thread blocked reading it (a runtime closed there).
        sock = self._inner.get_extra_info("socket")
        if isinstance(sock, socket.socket):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
        self._inner.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.NetworkStream:
        budget = _budget(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(self._inner.start_tls(ssl_context, server_hostname, budget))


class _AsyncDeadlineStream(_Watched[httpcore2.AsyncNetworkStream], httpcore2.AsyncNetworkStream):
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        data = await self._inner.read(max_bytes, _budget(timeout, httpcore2.ReadTimeout))
        self.wire.received(data)
        return data

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self.wire.sending()
        await self._inner.write(buffer, _budget(timeout, httpcore2.WriteTimeout))

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        budget = _budget(timeout, httpcore2.ConnectTimeout)
        inner = await self._inner.start_tls(ssl_context, server_hostname, budget)
        return _AsyncDeadlineStream(inner)


# The rest of httpcore2's keywords (local address, socket options) pass through.
class _DeadlineBackend(httpcore2.SyncBackend):
    def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, *args: Any, **kwargs: Any
    ) -> httpcore2.NetworkStream:
        budget = _budget(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(super().connect_tcp(host, port, budget, *args, **kwargs))

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, *args: Any, **kwargs: Any
    ) -> httpcore2.NetworkStream:
        budget = _budget(timeout, httpcore2.ConnectTimeout)
        return _DeadlineStream(super().connect_unix_socket(path, budget, *args, **kwargs))


class _AsyncDeadlineBackend(httpcore2.AnyIOBackend):
    async def connect_tcp(
        self, host: str, port: int, timeout: float | None = None, *args: Any, **kwargs: Any
    ) -> httpcore2.AsyncNetworkStream:
        budget = _budget(timeout, httpcore2.ConnectTimeout)
        return _AsyncDeadlineStream(await super().connect_tcp(host, port, budget, *args, **kwargs))

    async def connect_unix_socket(
        self, path: str, timeout: float | None = None, *args: Any, **kwargs: Any
    ) -> httpcore2.AsyncNetworkStream:
        budget = _budget(timeout, httpcore2.ConnectTimeout)
        inner = await super().connect_unix_socket(path, budget, *args, **kwargs)
        return _AsyncDeadlineStream(inner)


class ConnectionCutShort(httpx.ReadError):
    """The server closed the connection before the response was complete."""


class ResponseOverrun(httpx.RemoteProtocolError):
    """Bytes followed the end of a response on its connection."""


def _as_httpx(error: Exception, wire: _Wire | None) -> Exception:
    """httpx's namesake of what httpcore2 raised (httpx's own table is private); a
    protocol error after the server closed the socket is a connection cut short."""
    if isinstance(error, httpcore2.RemoteProtocolError) and wire is not None and wire.eof:
        return ConnectionCutShort("the server closed the connection mid-response")
    for kind in type(error).mro():
        core, mapped = getattr(httpcore2, kind.__name__, None), getattr(httpx, kind.__name__, None)
        if core is kind and isinstance(mapped, type) and issubclass(mapped, httpx.TransportError):
            return mapped(str(error))
    return error


@contextmanager
def _exchange(request: httpx.Request) -> Iterator[httpcore2.Request]:
    """One request through a pool, its errors told apart by the wire it last wrote to."""
    token = _EXCHANGE_WIRE.set(None)
    try:
        yield httpcore2.Request(
            method=request.method,
            url=_core_url(request.url),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
    except Exception as error:
        raise _as_httpx(error, _EXCHANGE_WIRE.get()) from None
    finally:
        _EXCHANGE_WIRE.reset(token)


def _core_url(url: httpx.URL) -> httpcore2.URL:
    return httpcore2.URL(
        scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
    )


def _httpx_response(request: httpx.Request, response: httpcore2.Response) -> httpx.Response:
    """httpx's response of both layers; a no-body status's connection is poisoned at once."""
    stream = response.extensions.get("network_stream")
    wire = stream.wire if isinstance(stream, _Watched) else None
    if wire is not None and (response.status in _NO_BODY or response.status < 200):
        wire.poisoned = True
    return httpx.Response(
        status_code=response.status,
        headers=response.headers,
        stream=_ResponseStream(response, wire, request.method.encode()),
        extensions=response.extensions,
    )


class _ResponseStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body of either layer; after its last byte (before the connection goes back to the
    pool), the check for bytes past its end."""

    def __init__(self, response: httpcore2.Response, wire: _Wire | None, method: bytes) -> None:
        self._response, self._wire, self._method = response, wire, method

    @contextmanager
    def _checked(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            raise _as_httpx(error, self._wire) from None
        if self._wire is not None and self._wire.overran(self._method, self._response.headers):
            self._wire.poisoned = True
            raise ResponseOverrun("bytes follow the end of the response")

    def __iter__(self) -> Iterator[bytes]:
        with self._checked():
            yield from self._response.iter_stream()

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with self._checked():
            async for chunk in self._response.aiter_stream():
                yield chunk

    def close(self) -> None:
        self._response.close()

    async def aclose(self) -> None:
        await self._response.aclose()


_Pool = TypeVar("_Pool", httpcore2.ConnectionPool, httpcore2.AsyncConnectionPool)


class _Bounded(Generic[_Pool]):
    """Both transports' construction: httpx's arguments, a fresh pool on demand."""

    _served: asyncio.AbstractEventLoop | None = None  # the loop an async pool serves
    _pool_type: Callable[..., _Pool]
    _backend_type: type[httpcore2.SyncBackend | httpcore2.AnyIOBackend]

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | str | bool = True,
        cert: Any = None,
        limits: httpx.Limits | None = None,
        proxy: str | httpx.Proxy | None = None,
        local_address: str | None = None,
        uds: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> None:
        limits = limits or httpx.Limits(max_connections=100)
        proxy = httpx.Proxy(url=proxy) if isinstance(proxy, str) else proxy
        self._options: dict[str, Any] = {
            "ssl_context": httpx.create_ssl_context(verify=verify, cert=cert, trust_env=False),
            "proxy": proxy
            and httpcore2.Proxy(
                url=_core_url(proxy.url),
                auth=proxy.raw_auth,
                headers=proxy.headers.raw,
                ssl_context=proxy.ssl_context,
            ),
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
            "local_address": local_address,
            "uds": uds,
            "socket_options": None if socket_options is None else list(socket_options),
        }
        self.pool: _Pool = self._new_pool()
        _LIVE.add(self)

    def _new_pool(self) -> _Pool:
        return self._pool_type(network_backend=self._backend_type(), **self._options)


class DeadlineTransport(_Bounded[httpcore2.ConnectionPool], httpx.BaseTransport):
    """An httpx transport whose round trips end by the caller's deadline; takes
    ``httpx.HTTPTransport``'s connection arguments (a host lends one for TLS, a proxy)."""

    _pool_type, _backend_type = httpcore2.ConnectionPool, _DeadlineBackend

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        with _exchange(request) as core:
            response = self.pool.handle_request(core)
        return _httpx_response(request, response)

    def close(self) -> None:
        self.pool.close()


class AsyncDeadlineTransport(_Bounded[httpcore2.AsyncConnectionPool], httpx.AsyncBaseTransport):
    """``DeadlineTransport`` for ``httpx.AsyncClient``; a pool belongs to the event loop
    that first used it (its sockets do)."""

    _pool_type, _backend_type = httpcore2.AsyncConnectionPool, _AsyncDeadlineBackend

    def _bind(self) -> None:
        """Serve the first running loop, or a new one once that has closed; another live
        loop's call is refused."""
        import asyncio  # not at import time: httpx and httpcore2 do without it

        loop, bound = asyncio.get_running_loop(), self._served
        if bound is loop:
            return
        if bound is not None:
            if not bound.is_closed():
                raise InvalidData(
                    "this AsyncDeadlineTransport serves another event loop: its pooled "
                    "sockets belong to that loop (lend one per loop, or none)"
                )
            self.pool = self._new_pool()
        self._served = loop

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        self._bind()
        with _exchange(request) as core:
            response = await self.pool.handle_async_request(core)
        return _httpx_response(request, response)

    async def aclose(self) -> None:
        await self.pool.aclose()


_LIVE: weakref.WeakSet[_Bounded[Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Fresh pools; the parent's connections are dropped, never closed (the parent still
    reads those sockets)."""
    for transport in list(_LIVE):
        transport.pool, transport._served = transport._new_pool(), None


os.register_at_fork(after_in_child=_after_fork_in_child)
