"""The thin socket layer: one bounded POST over a pooled ``httpx.Client``, read whole or
incrementally (streaming adapters).

Everything that can go wrong on the wire is translated here, in one place, into a
``WireFailure``; parsing and mapping of what came back live in ``wire``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx

from templiqx_core import RuntimeFailureCode

from ._deadline import deadline
from ._wire import MAX_RESPONSE_BYTES, WireFailure

__all__ = ["BoundedStream", "HttpResponse", "open_bounded", "post_bounded"]


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: httpx.Headers
    body: bytes


def _too_large(max_bytes: int) -> WireFailure:
    return WireFailure(
        RuntimeFailureCode.INVALID_RESPONSE, f"response body exceeds {max_bytes} bytes"
    )


def _timeout(timeout_s: float) -> WireFailure:
    return WireFailure(
        RuntimeFailureCode.TIMEOUT, f"model call exceeded its {timeout_s:g} s deadline"
    )


class BoundedStream:
    """An open response whose body is read within the call's deadline and size bound."""

    def __init__(
        self, response: httpx.Response, *, at: float, timeout_s: float, max_bytes: int
    ) -> None:
        self.status = response.status_code
        self.headers = response.headers
        self._response = response
        self._at = at
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self.bytes_read = 0

    def iter_bytes(self) -> Iterator[bytes]:
        """Body chunks as they arrive; past ``max_bytes`` (decoded) or the deadline it stops."""
        for chunk in self._response.iter_bytes():
            self.bytes_read += len(chunk)
            if self.bytes_read > self._max_bytes:
                raise _too_large(self._max_bytes)
            if time.monotonic() > self._at:
                raise _timeout(self._timeout_s)
            yield chunk


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

    The deadline covers the whole round trip: with a ``DeadlineTransport`` underneath,
    every socket operation gets only what is left of it (see ``deadline``); the body loop
    also checks it between reads, so even without one a trickled body cannot evade it.
    The body is abandoned past ``max_bytes`` (decoded), whatever ``Content-Length`` says.
    Every wire error raised inside the block becomes a ``WireFailure``; leaving the block
    (normally, on a failure, or because the caller cancelled) releases the connection.
    """
    timeout = httpx.Timeout(timeout_s)
    try:
        with (
            deadline(timeout_s) as at,
            client.stream("POST", url, content=content, headers=headers, timeout=timeout) as resp,
        ):
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise _too_large(max_bytes)
            yield BoundedStream(resp, at=at, timeout_s=timeout_s, max_bytes=max_bytes)
    except httpx.TimeoutException:
        raise _timeout(timeout_s) from None
    except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as error:
        raise WireFailure(
            RuntimeFailureCode.UNAVAILABLE,
            f"model gateway unreachable ({type(error).__name__})",
        ) from None
    except httpx.DecodingError:
        raise WireFailure(
            RuntimeFailureCode.INVALID_RESPONSE, "response body could not be decoded"
        ) from None
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
        body = b"".join(stream.iter_bytes())
        return HttpResponse(stream.status, stream.headers, body)
