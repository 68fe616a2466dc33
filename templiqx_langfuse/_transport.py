"""One bounded POST over a pooled ``httpx.Client`` or ``httpx.AsyncClient``, read whole
or incrementally; every wire error becomes a ``WireFailure`` here.

The body is decoded here, not by httpx, which undoes any stack of codings a server names
(``gzip, gzip, gzip``) unbounded: a few hundred bytes could become gigabytes. Here one
coding at most is undone, in ``_STEP``-byte steps, size cap and deadline checked after each.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, NotRequired, TypedDict, Unpack

import httpx

from templiqx_core import RuntimeFailureCode

from ._deadline import ConnectionCutShort, ResponseOverrun, deadline
from ._redaction import SecretHeaders
from ._wire import MAX_RESPONSE_BYTES, WireFailure, _invalid

_STEP = 64 * 1024
# The content codings undone, and zlib's window bits for each.
_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: httpx.Headers
    body: bytes


class Post(TypedDict):
    content: bytes
    headers: dict[str, str]
    timeout_s: float  # the whole round trip's
    max_bytes: NotRequired[int]  # the decoded body's bound: MAX_RESPONSE_BYTES if not given


def _too_large(max_bytes: int) -> WireFailure:
    return _invalid(f"response body exceeds {max_bytes} bytes")


def _content_coding(headers: httpx.Headers) -> str | None:
    """The one content coding to undo, or a failure for stacks and codings never asked for."""
    named = [c.strip().lower() for c in headers.get_list("content-encoding", split_commas=True)]
    codings = [c for c in named if c not in ("", "identity")]
    if len(codings) > 1:
        raise _invalid("stacked content encodings are refused")
    if codings and codings[0] not in _WBITS:
        raise _invalid("unsupported content encoding")
    return codings[0] if codings else None


class _Decoder:
    """Undoes at most one content coding in bounded steps; counts raw and decoded bytes."""

    def __init__(self, coding: str | None, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.decoded = self.raw = 0  # body bytes handed out, and read off the wire
        self._coding = coding
        # deflate: zlib-wrapped first, raw deflate tried on error
        self._zlib: Any = None if coding is None else zlib.decompressobj(_WBITS[coding])

    def feed(self, data: bytes) -> Iterator[bytes]:
        self.raw += len(data)
        # Compressed input that decodes to nothing (empty deflate blocks) is bounded too.
        if self.raw > 2 * self.max_bytes:
            raise _too_large(self.max_bytes)
        yield from self._count(data) if self._zlib is None else self._inflate(data)

    def _count(self, piece: bytes) -> Iterator[bytes]:
        self.decoded += len(piece)
        if self.decoded > self.max_bytes:
            raise _too_large(self.max_bytes)
        if piece:
            yield piece

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        try:
            rest = data
            while rest:
                # Needed inside the loop: once an output cap has left a tail, the call that
                # reaches the end leaves the bytes past it in the tail too, and every later
                # call returns nothing, forever.
                if self._zlib.eof:
                    raise _invalid("bytes after the end of the compressed body")
                yield from self._count(self._zlib.decompress(rest, _STEP))
                rest = self._zlib.unconsumed_tail
        except zlib.error:
            if self._coding != "deflate" or self.decoded:
                raise _invalid("response body could not be decoded") from None
            # Some servers send raw deflate under that name (httpx tolerates it too).
            self._coding, self._zlib = "raw-deflate", zlib.decompressobj(-zlib.MAX_WBITS)
            yield from self._inflate(data)
        if self._zlib.eof and self._zlib.unused_data:
            raise _invalid("bytes after the end of the compressed body")

    def finish(self) -> None:
        if self._zlib is not None and not self._zlib.eof:
            raise _invalid("compressed response body is truncated")


class BoundedStream:
    """An open response whose body is read within the call's deadline and size bound;
    ``iter_bytes`` and ``aiter_bytes`` differ only in how raw bytes arrive."""

    def __init__(
        self, response: httpx.Response, at: float, late: WireFailure, max_bytes: int
    ) -> None:
        coding = _content_coding(response.headers)  # the head is checked before the body
        declared = response.headers.get("content-length")
        limit = max_bytes if coding is None else 2 * max_bytes
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(max_bytes)
        self.status = response.status_code
        self.headers = response.headers
        self._response = response
        self._at, self._late = at, late
        self._decoder = _Decoder(coding, max_bytes)

    def _in_memory(self) -> bytes | None:
        """The body of a response already in memory (a cassette replay), which httpx has
        decoded; its size still counts."""
        response = self._response
        if not (response.is_stream_consumed or response.is_closed):
            return None
        self._decoder = _Decoder(None, self._decoder.max_bytes)
        return response.content

    def _decoded(self, chunk: bytes) -> Iterator[bytes]:
        """Decoded pieces of one raw chunk, the deadline checked after every step."""
        for piece in self._decoder.feed(chunk):
            if time.monotonic() > self._at:
                raise self._late
            yield piece
        if time.monotonic() > self._at:
            raise self._late

    def iter_bytes(self) -> Iterator[bytes]:
        """Decoded body chunks as they arrive, within ``max_bytes`` and the deadline."""
        whole = self._in_memory()
        for chunk in self._response.iter_raw() if whole is None else (whole,):
            yield from self._decoded(chunk)
        self._decoder.finish()

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        whole = self._in_memory()
        if whole is not None:
            for piece in self._decoded(whole):
                yield piece
        else:
            async for chunk in self._response.aiter_raw():
                for piece in self._decoded(chunk):
                    yield piece
        self._decoder.finish()

    def body(self) -> HttpResponse:
        return HttpResponse(self.status, self.headers, b"".join(self.iter_bytes()))

    async def abody(self) -> HttpResponse:
        body = b"".join([piece async for piece in self.aiter_bytes()])
        return HttpResponse(self.status, self.headers, body)


def _wire_failure(error: httpx.HTTPError, late: WireFailure, at: float) -> WireFailure:
    """The one mapping of httpx's exceptions (and the bounded transports') to failures."""
    unavailable = RuntimeFailureCode.UNAVAILABLE
    if isinstance(error, httpx.PoolTimeout):
        detail = "no connection became free before the deadline (max_connections calls in flight)"
        return WireFailure(RuntimeFailureCode.TIMEOUT, detail)
    if isinstance(error, httpx.TimeoutException):
        return late
    if isinstance(error, ConnectionCutShort):
        return WireFailure(unavailable, "model gateway closed the connection mid-response")
    if isinstance(error, ResponseOverrun):
        return _invalid("bytes follow the end of the response")
    if isinstance(error, httpx.RemoteProtocolError):
        return _invalid("response is not valid HTTP/1.1")
    if isinstance(error, (httpx.NetworkError, httpx.ProxyError)):
        if time.monotonic() > at:  # a socket shut by the deadline's last read
            return late
        # A read or write failed after the gateway was reached: not "unreachable".
        refused = isinstance(error, (httpx.ConnectError, httpx.ProxyError))
        what = "unreachable" if refused else "connection broke mid-exchange"
        return WireFailure(unavailable, f"model gateway {what} ({type(error).__name__})")
    if isinstance(error, httpx.DecodingError):
        return _invalid("response body could not be decoded")
    return WireFailure(unavailable, f"model call failed ({type(error).__name__})")


@contextmanager
def _round_trip(
    post: Post,
) -> Iterator[tuple[dict[str, Any], Callable[[httpx.Response], BoundedStream]]]:
    """One round trip's deadline: ``client.stream``'s keywords, and what makes the
    response a ``BoundedStream``."""
    started, timeout_s = time.monotonic(), post["timeout_s"]
    with deadline(timeout_s) as at:
        capped = at < started + timeout_s
        whose = "the caller's overall deadline" if capped else f"its {timeout_s:g} s deadline"
        late = WireFailure(RuntimeFailureCode.TIMEOUT, f"model call exceeded {whose}")
        args = {
            "content": post["content"],
            # ``deflate`` is tolerated too, from servers that ignore what was asked for.
            "headers": SecretHeaders({**post["headers"], "accept-encoding": "gzip"}),
            # Every phase (pool wait included) gets what is left of the deadline.
            "timeout": httpx.Timeout(max(at - time.monotonic(), 0.001)),
        }
        max_bytes = post.get("max_bytes", MAX_RESPONSE_BYTES)
        try:
            yield args, lambda response: BoundedStream(response, at, late, max_bytes)
        except httpx.HTTPError as error:
            raise _wire_failure(error, late, at) from None


@contextmanager
def open_bounded(
    client: httpx.Client, url: httpx.URL | str, **post: Unpack[Post]
) -> Iterator[BoundedStream]:
    """POST and hold the response open. ``timeout_s`` bounds the whole round trip (capped by
    an enclosing deadline), ``max_bytes`` the decoded body; leaving releases the connection.
    """
    with _round_trip(post) as (args, bounded), client.stream("POST", url, **args) as response:
        yield bounded(response)


@asynccontextmanager
async def aopen_bounded(
    client: httpx.AsyncClient, url: httpx.URL | str, **post: Unpack[Post]
) -> AsyncIterator[BoundedStream]:
    """``open_bounded`` on an ``httpx.AsyncClient``; cancelling the task closes the stream."""
    with _round_trip(post) as (args, bounded):
        async with client.stream("POST", url, **args) as response:
            yield bounded(response)
