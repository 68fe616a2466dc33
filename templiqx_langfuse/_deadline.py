"""One bounded POST: ``BoundedStream`` decides, two thin drivers move its bytes over httpcore2
pools whose backend gives each socket operation what is left of one deadline (httpx's don't)."""

from __future__ import annotations

import contextlib
import math
import os
import socket
import ssl
import time
import weakref
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Generic, NotRequired, TypedDict, TypeVar, Unpack

import httpcore2
import httpx

from templiqx_core import InvalidData, RuntimeFailureCode

from . import _wire
from ._redaction import SecretHeaders

if TYPE_CHECKING:
    import asyncio

_DEADLINE: ContextVar[float | None] = ContextVar("templiqx_langfuse_deadline", default=None)
_UNAVAILABLE = RuntimeFailureCode.UNAVAILABLE


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


def _connecting(kwargs: dict[str, Any]) -> dict[str, Any]:
    return {**kwargs, "timeout": _budget(kwargs.get("timeout"), httpcore2.ConnectTimeout)}


#: The stream the current call last wrote to: tells a connection cut short from non-HTTP.
_LAST: ContextVar[_Counted[Any] | None] = ContextVar("templiqx_langfuse_last_stream", default=None)
_Stream = TypeVar("_Stream", httpcore2.NetworkStream, httpcore2.AsyncNetworkStream)


class _Counted(Generic[_Stream]):
    """Counts a response's bytes; a suspect connection reads as "readable" (the server
    spoke out of turn), which makes the pool close it instead of reusing it."""

    def __init__(self, inner: _Stream, gate: _Bounded[Any]) -> None:
        self._inner: _Stream = inner
        self._gate = gate
        self.got = self.head = 0
        self.eof = self.suspect = False

    def _sending(self, timeout: float | None) -> float | None:
        if self._gate.closed:
            raise httpcore2.WriteError("the transport is closed")
        self.got = self.head = 0
        _LAST.set(self)
        return _budget(timeout, httpcore2.WriteTimeout)

    def _reading(self, timeout: float | None) -> float | None:
        if self._gate.closed:
            raise httpcore2.ReadError("the transport is closed")
        return _budget(timeout, httpcore2.ReadTimeout)

    def _received(self, data: bytes) -> bytes:
        if not data:
            self.eof = True
        elif self.got == 0:  # a head split across reads, or with bare LFs, is not counted
            end = data.find(b"\r\n\r\n")
            bare = b"\n\n" in data[:end] or b"\n\r\n" in data[:end]
            self.head = end + 4 if end > 0 and not bare else -1
        self.got += len(data)
        return data

    def settled(self, status: int, headers: list[tuple[bytes, bytes]]) -> None:
        """After a response's last byte: whether the byte count confirms where it ended."""
        lengths = [v for k, v in headers if k.lower() in (b"content-length", b"transfer-encoding")]
        exact = status >= 200 and status not in (204, 304) and self.head > 0
        counted = exact and len(lengths) == 1 and lengths[0].strip().isdigit()
        if not counted or self.got != self.head + int(lengths[0]):
            self.suspect = True

    def get_extra_info(self, info: str) -> Any:
        return True if info == "is_readable" and self.suspect else self._inner.get_extra_info(info)


class _DeadlineStream(_Counted[httpcore2.NetworkStream], httpcore2.NetworkStream):
    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._received(self._inner.read(max_bytes, self._reading(timeout)))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._sending(timeout))

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
        inner = self._inner.start_tls(ssl_context, server_hostname, budget)
        return _DeadlineStream(inner, self._gate)


class _AsyncDeadlineStream(_Counted[httpcore2.AsyncNetworkStream], httpcore2.AsyncNetworkStream):
    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._received(await self._inner.read(max_bytes, self._reading(timeout)))

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, self._sending(timeout))

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
        return _AsyncDeadlineStream(inner, self._gate)


def _as_httpx(error: Exception, stream: _Counted[Any] | None) -> Exception:
    """httpx's namesake of what httpcore2 raised (httpx's table is private); a protocol error
    after the server closed the socket is a connection cut short (retryable)."""
    if isinstance(error, httpcore2.RemoteProtocolError) and stream is not None and stream.eof:
        return httpx.ReadError("the server closed the connection mid-response")
    for kind in type(error).mro():
        core, mapped = getattr(httpcore2, kind.__name__, None), getattr(httpx, kind.__name__, None)
        if core is kind and isinstance(mapped, type) and issubclass(mapped, httpx.TransportError):
            return mapped(str(error))
    return error


def _core_url(url: httpx.URL) -> httpcore2.URL:
    return httpcore2.URL(
        scheme=url.raw_scheme, host=url.raw_host, port=url.port, target=url.raw_path
    )


@contextmanager
def _exchange(request: httpx.Request, limit: int | None) -> Iterator[httpcore2.Request]:
    """One request through a pool, its errors told apart by the stream it last wrote to."""
    if limit is not None:
        request.headers["accept-encoding"] = "identity"
    token = _LAST.set(None)
    try:
        yield httpcore2.Request(
            method=request.method,
            url=_core_url(request.url),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
    except Exception as error:
        raise _as_httpx(error, _LAST.get()) from None
    finally:
        _LAST.reset(token)


class _ResponseStream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """A body of either layer; after its last byte the byte count decides reuse."""

    def __init__(self, response: httpcore2.Response, limit: int | None) -> None:
        self._response, self._left = response, math.inf if limit is None else limit
        stream = response.extensions.get("network_stream")
        self._stream = stream if isinstance(stream, _Counted) else None

    @contextmanager
    def _settled(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            raise _as_httpx(error, self._stream) from None
        if self._stream is not None:
            self._stream.settled(self._response.status, self._response.headers)

    def _within(self, chunk: bytes) -> bytes:
        self._left -= len(chunk)  # past the limit: the chunk's head, and the read ends
        return chunk if self._left >= 0 else chunk[: int(self._left)]

    def __iter__(self) -> Iterator[bytes]:
        with self._settled():
            for chunk in self._response.iter_stream():
                yield self._within(chunk)
                if self._left < 0:
                    return

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with self._settled():
            async for chunk in self._response.aiter_stream():
                yield self._within(chunk)
                if self._left < 0:
                    return

    def close(self) -> None:
        self._response.close()

    async def aclose(self) -> None:
        await self._response.aclose()

    @classmethod
    def response(cls, core: httpcore2.Response, limit: int | None) -> httpx.Response:
        headers = core.headers
        if limit is not None:  # the body as read, undecoded: httpx must not inflate it
            cut = (b"content-length", b"content-encoding")
            headers = [(k, v) for k, v in headers if k.lower() not in cut]
        stream = cls(core, limit)
        return httpx.Response(
            core.status, headers=headers, stream=stream, extensions=core.extensions
        )


_Pool = TypeVar("_Pool", httpcore2.ConnectionPool, httpcore2.AsyncConnectionPool)


class _Bounded(Generic[_Pool]):
    _served: asyncio.AbstractEventLoop | None = None  # the loop an async pool serves
    closed = False  # then its connections send and read nothing more
    _pool_type: Any

    def __init__(
        self,
        *,
        verify: ssl.SSLContext | str | bool = True,
        limits: httpx.Limits | None = None,
        proxy: str | None = None,
        max_bytes: int | None = None,  # read undecoded, for a client that reads bodies whole
    ) -> None:
        self.max_bytes = max_bytes
        limits = limits or httpx.Limits(max_connections=100)
        via = httpx.Proxy(url=proxy) if proxy else None  # parses its user-info into auth
        self._options: dict[str, Any] = {
            "ssl_context": httpx.create_ssl_context(verify=verify),
            "proxy": via and httpcore2.Proxy(url=_core_url(via.url), auth=via.raw_auth),
            "max_connections": limits.max_connections,
            "max_keepalive_connections": limits.max_keepalive_connections,
            "keepalive_expiry": limits.keepalive_expiry,
        }
        self.pool: _Pool = self._new_pool()
        _LIVE.add(self)

    def _new_pool(self) -> _Pool:
        pool: _Pool = self._pool_type(network_backend=self, **self._options)
        return pool


class DeadlineTransport(
    _Bounded[httpcore2.ConnectionPool], httpx.BaseTransport, httpcore2.SyncBackend
):
    """An httpx transport whose round trips end by the caller's deadline (its pool connects
    through it); takes ``httpx.HTTPTransport``'s connection arguments (a host lends one)."""

    _pool_type = httpcore2.ConnectionPool

    def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.NetworkStream:
        return _DeadlineStream(super().connect_tcp(*args, **_connecting(kwargs)), self)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.SyncByteStream)
        with _exchange(request, self.max_bytes) as core:
            return _ResponseStream.response(self.pool.handle_request(core), self.max_bytes)

    def close(self) -> None:
        """Close every connection, those in use and those still connecting included."""
        self.closed = True
        self.pool.close()


class AsyncDeadlineTransport(
    _Bounded[httpcore2.AsyncConnectionPool], httpx.AsyncBaseTransport, httpcore2.AnyIOBackend
):
    """``DeadlineTransport`` for ``httpx.AsyncClient``; a pool belongs to the event loop
    that first used it (its sockets do), or a new one once that loop has closed."""

    _pool_type = httpcore2.AsyncConnectionPool

    async def connect_tcp(self, *args: Any, **kwargs: Any) -> httpcore2.AsyncNetworkStream:
        return _AsyncDeadlineStream(await super().connect_tcp(*args, **_connecting(kwargs)), self)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        import asyncio  # not at import time: httpx and httpcore2 do without it

        loop, bound = asyncio.get_running_loop(), self._served
        if bound is not None and bound is not loop:
            if not bound.is_closed():
                raise InvalidData("this transport serves another event loop (lend one per loop)")
            self.pool = self._new_pool()
        self._served = loop
        with _exchange(request, self.max_bytes) as core:
            core_response = await self.pool.handle_async_request(core)
            return _ResponseStream.response(core_response, self.max_bytes)

    async def aclose(self) -> None:
        self.closed = True
        await self.pool.aclose()


_LIVE: weakref.WeakSet[_Bounded[Any]] = weakref.WeakSet()


def _after_fork_in_child() -> None:
    """Fresh pools; the parent's connections are dropped, never closed (it still reads them)."""
    for transport in list(_LIVE):
        transport.pool, transport._served = transport._new_pool(), None


os.register_at_fork(after_in_child=_after_fork_in_child)


_INVALID = RuntimeFailureCode.INVALID_RESPONSE
_FAILURES: tuple[tuple[type[Exception] | tuple[type[Exception], ...], RuntimeFailureCode, str], ...]
_FAILURES = (
    (httpx.RemoteProtocolError, _INVALID, "response is not valid HTTP/1.1"),
    ((httpx.ConnectError, httpx.ProxyError), _UNAVAILABLE, "model gateway unreachable"),
    (httpx.NetworkError, _UNAVAILABLE, "model gateway connection broke mid-exchange"),
    (httpx.DecodingError, _INVALID, "response body could not be decoded"),
    (httpx.HTTPError, _UNAVAILABLE, "model call failed"),
)


class Post(TypedDict):
    content: bytes
    headers: Mapping[str, str]
    timeout_s: float  # the whole round trip's
    max_bytes: NotRequired[int]  # the body's bound: _wire.MAX_RESPONSE_BYTES if not given


class BoundedStream:
    """One round trip's decisions, sans I/O, and its response read within them: a driver
    sends within ``deadline``, hands the response to ``opened``, an error to ``failure``."""

    status: int
    headers: httpx.Headers
    _response: httpx.Response
    _whole: bytes | None  # the body, when there is none left to read

    def __init__(self, post: Post) -> None:
        self.timeout_s = post["timeout_s"]
        self.max_bytes = post.get("max_bytes", _wire.MAX_RESPONSE_BYTES)
        headers = SecretHeaders({**post["headers"], "accept-encoding": "identity"})
        self._request = {"content": post["content"], "headers": headers}
        self.size, self.at = 0, 0.0

    @contextmanager
    def deadline(self) -> Iterator[dict[str, Any]]:
        """Yields ``client.stream``'s arguments; httpx's timeout (pool wait too) within it."""
        with deadline(self.timeout_s) as self.at:
            timeout = httpx.Timeout(max(self.at - time.monotonic(), 1e-3))
            yield {**self._request, "timeout": timeout}

    def late(self) -> _wire.WireFailure:
        return _wire.WireFailure(RuntimeFailureCode.TIMEOUT, "model call exceeded its deadline")

    def opened(self, response: httpx.Response) -> BoundedStream:
        """The head, before any body is read; a cassette's replay, held decoded, still counts."""
        self.status, self.headers, self._response = response.status_code, response.headers, response
        self._whole = None
        if response.is_stream_consumed or response.is_closed:
            self._whole = self.feed(response.content)
            return self
        codings = response.headers.get_list("content-encoding", split_commas=True)
        if any(c.strip().lower() not in ("", "identity") for c in codings):
            if not 200 <= response.status_code < 300:
                self._whole = b""  # the status names the failure (a 429 stays retryable) unread
                return self
            raise _wire.invalid("response is compressed although identity was asked for")
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large()
        return self

    def feed(self, chunk: bytes) -> bytes:
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise self._too_large()
        if time.monotonic() > self.at:
            raise self.late()
        return chunk

    def _too_large(self) -> _wire.WireFailure:
        """Over the bound: an error status still names its failure (a 429 stays retryable)."""
        failure = _wire.failure_for_status(self.status, self.headers, b"")
        return failure or _wire.invalid(f"response body exceeds {self.max_bytes} bytes")

    def failure(self, error: httpx.HTTPError) -> _wire.WireFailure:
        """httpx's exceptions (and the bounded transports') as failures; a socket the
        deadline's last read shut fails as a network error, late."""
        if isinstance(error, httpx.PoolTimeout):
            detail = "no connection became free before the deadline (max_connections)"
            return _wire.WireFailure(RuntimeFailureCode.TIMEOUT, detail)
        network = isinstance(error, (httpx.NetworkError, httpx.ProxyError))
        if isinstance(error, httpx.TimeoutException) or (network and time.monotonic() > self.at):
            return self.late()
        code, what = next((c, w) for kind, c, w in _FAILURES if isinstance(error, kind))
        return _wire.WireFailure(code, f"{what} ({type(error).__name__})")

    def iter_bytes(self) -> Iterator[bytes]:
        if self._whole is not None:
            yield self._whole
            return
        for chunk in self._response.iter_raw():
            yield self.feed(chunk)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self._whole is not None:
            yield self._whole
            return
        async for chunk in self._response.aiter_raw():
            yield self.feed(chunk)

    def body(self) -> bytes:
        return b"".join(self.iter_bytes())

    async def abody(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    def settle(self, body: bytes) -> _wire.Completion:
        """The completion a whole response carries, or the failure its status names."""
        failure = _wire.failure_for_status(self.status, self.headers, body)
        if failure is not None:
            raise failure
        return _wire.parse_completion(body)


@contextmanager
def open_bounded(
    client: httpx.Client, url: httpx.URL | str, **post: Unpack[Post]
) -> Iterator[BoundedStream]:
    """POST, the response held open: ``timeout_s`` bounds the trip, ``max_bytes`` the body."""
    trip = BoundedStream(post)
    try:
        with trip.deadline() as args, client.stream("POST", url, **args) as response:
            yield trip.opened(response)
    except httpx.HTTPError as error:
        raise trip.failure(error) from None


@asynccontextmanager
async def aopen_bounded(
    client: httpx.AsyncClient, url: httpx.URL | str, **post: Unpack[Post]
) -> AsyncIterator[BoundedStream]:
    """``open_bounded`` on an ``httpx.AsyncClient``; cancelling the task closes the stream."""
    trip = BoundedStream(post)
    try:
        with trip.deadline() as args:
            async with client.stream("POST", url, **args) as response:
                yield trip.opened(response)
    except httpx.HTTPError as error:
        raise trip.failure(error) from None
