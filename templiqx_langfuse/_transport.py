"""One bounded POST: ``RoundTrip`` holds every decision (request, deadline, size bound,
status to failure), the two drivers only move bytes over httpx, sync or async.

The request asks for ``identity`` and a body compressed anyway is refused, never inflated:
a few hundred coded bytes can stand for gigabytes, and httpx decodes in one unbounded step.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import NotRequired, TypedDict, Unpack

import httpx

from templiqx_core import RuntimeFailureCode

from ._deadline import ConnectionCutShort, deadline
from ._redaction import SecretHeaders
from ._wire import (
    MAX_RESPONSE_BYTES,
    Completion,
    WireFailure,
    _invalid,
    failure_for_status,
    parse_completion,
)

_UNAVAILABLE = RuntimeFailureCode.UNAVAILABLE


class Post(TypedDict):
    content: bytes
    headers: Mapping[str, str]
    timeout_s: float  # the whole round trip's
    max_bytes: NotRequired[int]  # the body's bound: MAX_RESPONSE_BYTES if not given


class RoundTrip:
    """The decisions of one round trip, sans I/O: a driver sends within ``deadline``,
    hands the response's head to ``opened``, each chunk to ``feed``, an error to ``failure``."""

    __slots__ = ("at", "capped", "content", "headers", "max_bytes", "size", "timeout_s")

    def __init__(self, post: Post) -> None:
        self.content, self.timeout_s = post["content"], post["timeout_s"]
        self.headers = SecretHeaders({**post["headers"], "accept-encoding": "identity"})
        self.max_bytes = post.get("max_bytes", MAX_RESPONSE_BYTES)
        self.size, self.at, self.capped = 0, 0.0, False

    @contextmanager
    def deadline(self) -> Iterator[httpx.Timeout]:
        """The socket-level deadline of what runs inside, as httpx's timeout of every phase
        (pool wait included)."""
        started = time.monotonic()
        with deadline(self.timeout_s) as self.at:
            self.capped = self.at < started + self.timeout_s
            yield httpx.Timeout(max(self.at - time.monotonic(), 1e-3))

    def late(self) -> WireFailure:
        whose = "the caller's overall" if self.capped else f"its {self.timeout_s:g} s"
        return WireFailure(RuntimeFailureCode.TIMEOUT, f"model call exceeded {whose} deadline")

    def opened(self, response: httpx.Response) -> bytes | None:
        """Check the head before any body is read; the body if there is none to read (httpx
        holds a cassette's replay decoded: its size still counts)."""
        if response.is_stream_consumed or response.is_closed:
            return self.feed(response.content)
        codings = response.headers.get_list("content-encoding", split_commas=True)
        if any(c.strip().lower() not in ("", "identity") for c in codings):
            if not 200 <= response.status_code < 300:
                return b""  # the status names the failure (a 429 stays retryable) unread
            raise _invalid("response is compressed although identity was asked for")
        declared = response.headers.get("content-length", "")
        if declared.isascii() and declared.isdigit() and int(declared) > self.max_bytes:
            raise self._too_large()
        return None

    def feed(self, chunk: bytes) -> bytes:
        """One chunk of the body, within the size bound and the deadline."""
        self.size += len(chunk)
        if self.size > self.max_bytes:
            raise self._too_large()
        if time.monotonic() > self.at:
            raise self.late()
        return chunk

    def _too_large(self) -> WireFailure:
        return _invalid(f"response body exceeds {self.max_bytes} bytes")

    def failure(self, error: httpx.HTTPError) -> WireFailure:
        """The one mapping of httpx's exceptions (and the bounded transports') to failures."""
        if isinstance(error, httpx.PoolTimeout):
            detail = (
                "no connection became free before the deadline (max_connections calls in flight)"
            )
            return WireFailure(RuntimeFailureCode.TIMEOUT, detail)
        if isinstance(error, httpx.TimeoutException):
            return self.late()
        if isinstance(error, ConnectionCutShort):
            return WireFailure(_UNAVAILABLE, "model gateway closed the connection mid-response")
        if isinstance(error, httpx.RemoteProtocolError):
            return _invalid("response is not valid HTTP/1.1")
        if isinstance(error, (httpx.NetworkError, httpx.ProxyError)):
            if time.monotonic() > self.at:  # a socket shut by the deadline's last read
                return self.late()
            # A read or write failed after the gateway was reached: not "unreachable".
            refused = isinstance(error, (httpx.ConnectError, httpx.ProxyError))
            what = "unreachable" if refused else "connection broke mid-exchange"
            return WireFailure(_UNAVAILABLE, f"model gateway {what} ({type(error).__name__})")
        if isinstance(error, httpx.DecodingError):
            return _invalid("response body could not be decoded")
        return WireFailure(_UNAVAILABLE, f"model call failed ({type(error).__name__})")


class BoundedStream:
    """An open response read within its round trip's bounds, sync or async."""

    def __init__(self, trip: RoundTrip, response: httpx.Response) -> None:
        self.status, self.headers = response.status_code, response.headers
        self._whole = trip.opened(response)
        self.trip, self._response = trip, response

    def iter_bytes(self) -> Iterator[bytes]:
        if self._whole is not None:
            yield self._whole
            return
        for chunk in self._response.iter_raw():
            yield self.trip.feed(chunk)

    async def aiter_bytes(self) -> AsyncIterator[bytes]:
        if self._whole is not None:
            yield self._whole
            return
        async for chunk in self._response.aiter_raw():
            yield self.trip.feed(chunk)

    def body(self) -> bytes:
        return b"".join(self.iter_bytes())

    async def abody(self) -> bytes:
        return b"".join([chunk async for chunk in self.aiter_bytes()])

    def settle(self, body: bytes) -> Completion:
        """The completion a whole response carries, or the failure its status names."""
        failure = failure_for_status(self.status, self.headers, body)
        if failure is not None:
            raise failure
        return parse_completion(body)


@contextmanager
def open_bounded(
    client: httpx.Client, url: httpx.URL | str, **post: Unpack[Post]
) -> Iterator[BoundedStream]:
    """POST and hold the response open. ``timeout_s`` bounds the whole round trip (capped by
    an enclosing deadline), ``max_bytes`` the body; leaving releases the connection."""
    trip = RoundTrip(post)
    try:
        with (
            trip.deadline() as timeout,
            client.stream(
                "POST", url, content=trip.content, headers=trip.headers, timeout=timeout
            ) as response,
        ):
            yield BoundedStream(trip, response)
    except httpx.HTTPError as error:
        raise trip.failure(error) from None


@asynccontextmanager
async def aopen_bounded(
    client: httpx.AsyncClient, url: httpx.URL | str, **post: Unpack[Post]
) -> AsyncIterator[BoundedStream]:
    """``open_bounded`` on an ``httpx.AsyncClient``; cancelling the task closes the stream."""
    trip = RoundTrip(post)
    try:
        with trip.deadline() as timeout:
            async with client.stream(
                "POST", url, content=trip.content, headers=trip.headers, timeout=timeout
            ) as response:
                yield BoundedStream(trip, response)
    except httpx.HTTPError as error:
        raise trip.failure(error) from None
