"""The thin socket layer: one bounded POST over a pooled ``httpx.Client``, read whole or
incrementally (streaming adapters).

Everything that can go wrong on the wire is translated here, in one place, into a
``WireFailure``; parsing and mapping of what came back live in ``wire``.

The body is read raw and decoded here, not by httpx: httpx decodes any stack of
encodings a server names (``gzip, gzip, gzip``) and bounds nothing until a decoded
chunk is handed over, so a few hundred bytes on the wire can become gigabytes in
memory. Here one coding at most is accepted (``gzip`` or ``deflate``), and decoding
proceeds in steps of at most ``_STEP`` bytes, checking the size cap and the deadline
after each: peak memory stays within the cap plus one step.
"""

from __future__ import annotations

import time
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httpx

from templiqx_core import InvalidData, RuntimeFailureCode

from ._deadline import DeadlineTransport, deadline, poison_connection
from ._wire import MAX_RESPONSE_BYTES, WireFailure

if TYPE_CHECKING:
    import ssl

__all__ = [
    "ACCEPT_ENCODING",
    "BoundedStream",
    "HttpResponse",
    "build_client",
    "check_host_client",
    "open_bounded",
    "post_bounded",
]

ACCEPT_ENCODING = "gzip"
"""What the adapter asks for; ``deflate`` is tolerated from servers that ignore it."""
_STEP = 64 * 1024
# Statuses that never carry a body (RFC 9110): bytes after their headers would be read
# by the next call on the connection as its own response.
_NO_BODY = frozenset({204, 304})
# h11's words for a connection cut short (a transport failure, worth a retry); every
# other protocol error is a server speaking something that is not HTTP/1.1.
_CUT_SHORT = ("peer closed connection", "server disconnected")


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: httpx.Headers
    body: bytes


def _invalid(detail: str) -> WireFailure:
    return WireFailure(RuntimeFailureCode.INVALID_RESPONSE, detail)


def _too_large(max_bytes: int) -> WireFailure:
    return _invalid(f"response body exceeds {max_bytes} bytes")


def _timeout(timeout_s: float, capped: bool) -> WireFailure:
    whose = "the caller's overall deadline" if capped else f"its {timeout_s:g} s deadline"
    return WireFailure(RuntimeFailureCode.TIMEOUT, f"model call exceeded {whose}")


def _content_coding(headers: httpx.Headers) -> str | None:
    """The one content coding to undo, or a failure for stacks and codings never asked for."""
    codings = [
        c.strip().lower()
        for c in headers.get_list("content-encoding", split_commas=True)
        if c.strip() and c.strip().lower() != "identity"
    ]
    if len(codings) > 1:
        raise _invalid("stacked content encodings are refused")
    if not codings:
        return None
    coding = {"gzip": "gzip", "x-gzip": "gzip", "deflate": "deflate"}.get(codings[0])
    if coding is None:
        raise _invalid("unsupported content encoding")
    return coding


class _Decoder:
    """Undoes at most one content coding in bounded steps; counts raw and decoded bytes."""

    def __init__(self, coding: str | None, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.decoded = 0
        self.raw = 0
        self._coding = coding
        self._zlib: Any = None
        if coding == "gzip":
            self._zlib = zlib.decompressobj(16 + zlib.MAX_WBITS)
        elif coding == "deflate":
            self._zlib = zlib.decompressobj()  # zlib-wrapped; raw deflate tried on error

    def feed(self, data: bytes) -> Iterator[bytes]:
        self.raw += len(data)
        # Compressed input that decodes to nothing (empty deflate blocks) is bounded too.
        if self.raw > 2 * self.max_bytes:
            raise _too_large(self.max_bytes)
        if self._zlib is None:
            yield from self._count(data)
            return
        try:
            yield from self._inflate(data)
        except zlib.error:
            if self._coding != "deflate" or self.decoded:
                raise _invalid("response body could not be decoded") from None
            # Some servers send raw deflate under that name (httpx tolerates it too).
            self._coding, self._zlib = "raw-deflate", zlib.decompressobj(-zlib.MAX_WBITS)
            try:
                yield from self._inflate(data)
            except zlib.error:
                raise _invalid("response body could not be decoded") from None

    def _count(self, piece: bytes) -> Iterator[bytes]:
        self.decoded += len(piece)
        if self.decoded > self.max_bytes:
            raise _too_large(self.max_bytes)
        if piece:
            yield piece

    def _inflate(self, data: bytes) -> Iterator[bytes]:
        while data:
            if self._zlib.eof:
                raise _invalid("bytes after the end of the compressed body")
            yield from self._count(self._zlib.decompress(data, _STEP))
            data = self._zlib.unconsumed_tail
        if self._zlib.eof and self._zlib.unused_data:
            raise _invalid("bytes after the end of the compressed body")

    def finish(self) -> None:
        if self._zlib is not None and not self._zlib.eof:
            raise _invalid("compressed response body is truncated")


def _trailing_bytes(response: httpx.Response) -> bool:
    """Whether bytes followed the end of the response on its connection.

    They can only be a second, unrequested response. httpcore keeps them in the h11
    state of the connection, which no public API exposes; when the chain is not there
    (another transport, a cassette) there is no pooled connection to protect either.
    """
    node: Any = response.stream
    # httpx's bound stream → its transport stream → httpcore's pool stream → the HTTP/1.1
    # connection's stream → the connection → its h11 state.
    for name in ("_stream", "_httpcore_stream", "_stream", "_connection", "_h11_state"):
        node = getattr(node, name, None)
    trailing = getattr(node, "trailing_data", None)
    return bool(trailing and trailing[0])


class BoundedStream:
    """An open response whose body is read within the call's deadline and size bound."""

    def __init__(
        self,
        response: httpx.Response,
        *,
        at: float,
        late: WireFailure,
        max_bytes: int,
        coding: str | None,
    ) -> None:
        self.status = response.status_code
        self.headers = response.headers
        self._response = response
        self._at = at
        self._late = late
        self._decoder = _Decoder(coding, max_bytes)
        self._trailing = False

    @property
    def bytes_read(self) -> int:
        """Decoded body bytes handed out so far."""
        return self._decoder.decoded

    def _raw(self) -> Iterator[bytes]:
        response = self._response
        if response.is_stream_consumed or response.is_closed:
            # A response built from bytes already in memory (a cassette replay): nothing
            # left to bound on the wire; the decoded size is still checked.
            self._decoder = _Decoder(None, self._decoder.max_bytes)
            yield response.content
            return
        # The raw stream itself, not ``iter_raw()``: iter_raw closes the response as soon
        # as the body ends, handing the connection back to the pool, where another thread
        # may already be reading its own response on it. Trailing bytes must be looked for
        # while the connection is still this call's.
        try:
            yield from response.stream  # type: ignore[misc]
            self._trailing = _trailing_bytes(response)
        finally:
            response.close()

    def iter_bytes(self) -> Iterator[bytes]:
        """Decoded body chunks as they arrive; past ``max_bytes`` or the deadline it stops.

        The deadline is checked after every read and every decoding step, so neither a
        trickling server nor a slow decode outlives it.
        """
        for chunk in self._raw():
            for piece in self._decoder.feed(chunk):
                if time.monotonic() > self._at:
                    raise self._late
                yield piece
            if time.monotonic() > self._at:
                raise self._late
        self._decoder.finish()
        if self._trailing:
            poison_connection(self._response.extensions)
            raise _invalid("bytes follow the end of the response")


def _protocol_failure(error: httpx.RemoteProtocolError) -> WireFailure:
    if str(error).lower().startswith(_CUT_SHORT):
        return WireFailure(
            RuntimeFailureCode.UNAVAILABLE, "model gateway closed the connection mid-response"
        )
    return _invalid("response is not valid HTTP/1.1")


@contextmanager
def open_bounded(
    client: httpx.Client,
    url: httpx.URL | str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout_s: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> Iterator[BoundedStream]:
    """POST and hold the response open: the seam streaming adapters read incrementally.

    The deadline covers the whole round trip, decoding included: with a
    ``DeadlineTransport`` underneath, every socket operation gets only what is left of
    it (or of an enclosing caller's deadline, whichever ends first); the body loop
    checks it between reads and decoding steps. The body is abandoned past
    ``max_bytes`` (decoded), whatever ``Content-Length`` says. Every wire error raised
    inside the block becomes a ``WireFailure``; leaving the block (normally, on a
    failure, or because the caller cancelled) releases the connection.
    """
    started = time.monotonic()
    with deadline(timeout_s) as at:
        late = _timeout(timeout_s, capped=at < started + timeout_s)
        try:
            with client.stream(
                "POST",
                url,
                content=content,
                headers={**headers, "accept-encoding": ACCEPT_ENCODING},
                timeout=httpx.Timeout(max(at - time.monotonic(), 0.001)),
            ) as resp:
                if resp.status_code in _NO_BODY or resp.status_code < 200:
                    poison_connection(resp.extensions)
                coding = _content_coding(resp.headers)
                declared = resp.headers.get("content-length")
                limit = max_bytes if coding is None else 2 * max_bytes
                if declared is not None and declared.isdigit() and int(declared) > limit:
                    raise _too_large(max_bytes)
                yield BoundedStream(resp, at=at, late=late, max_bytes=max_bytes, coding=coding)
        except httpx.TimeoutException:
            raise late from None
        except httpx.RemoteProtocolError as error:
            raise _protocol_failure(error) from None
        except (httpx.NetworkError, httpx.ProxyError) as error:
            raise WireFailure(
                RuntimeFailureCode.UNAVAILABLE,
                f"model gateway unreachable ({type(error).__name__})",
            ) from None
        except httpx.DecodingError:
            raise _invalid("response body could not be decoded") from None
        except httpx.HTTPError as error:
            raise WireFailure(
                RuntimeFailureCode.UNAVAILABLE, f"model call failed ({type(error).__name__})"
            ) from None


def post_bounded(
    client: httpx.Client,
    url: httpx.URL | str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout_s: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> HttpResponse:
    """POST and read the whole response within ``timeout_s`` and ``max_bytes``."""
    with open_bounded(
        client, url, content=content, headers=headers, timeout_s=timeout_s, max_bytes=max_bytes
    ) as stream:
        body = bytearray()
        for piece in stream.iter_bytes():
            body += piece
        return HttpResponse(stream.status, stream.headers, bytes(body))


def build_client(
    *, proxy: str | None = None, ssl_context: ssl.SSLContext | None = None
) -> httpx.Client:
    """The runtime's own pooled client: deadline-aware sockets, no redirects.

    Proxies are used only when configured explicitly: ``HTTP(S)_PROXY``/``ALL_PROXY``
    are not read (a proxy sees where every call goes, and over plain ``http://`` the
    key itself). ``ssl_context``: httpx's verifying default unless given.
    """
    tls: dict[str, Any] = {} if ssl_context is None else {"verify": ssl_context}
    return httpx.Client(
        transport=DeadlineTransport(
            limits=httpx.Limits(max_connections=64, max_keepalive_connections=32),
            proxy=proxy,
            **tls,
        ),
        follow_redirects=False,
        trust_env=False,
    )


def check_host_client(client: httpx.Client) -> httpx.Client:
    """Refuse a host's client whose sockets would not honour the round-trip deadline.

    httpx bounds each socket operation, not the exchange; only ``DeadlineTransport``
    enforces the total (and resets its pool after ``fork``). A client on any other
    transport would silently lose both, so it is refused rather than half-trusted.
    """
    transports = [client._transport, *client._mounts.values()]
    if not all(t is None or isinstance(t, DeadlineTransport) for t in transports):
        raise InvalidData(
            "http_client must be built on templiqx_langfuse.building_blocks.DeadlineTransport "
            "(httpx.Client(transport=DeadlineTransport(...), trust_env=False)): "
            "other transports cannot enforce the round-trip deadline"
        )
    return client
