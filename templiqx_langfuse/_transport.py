"""The thin socket layer: one bounded POST over a pooled ``httpx.Client``.

Everything that can go wrong on the wire is translated here, in one place, into a
``WireFailure``; parsing and mapping of what came back live in ``wire``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import httpx

from templiqx_core import RuntimeFailureCode

from ._deadline import deadline
from ._wire import MAX_RESPONSE_BYTES, WireFailure

__all__ = ["HttpResponse", "post_bounded"]


@dataclass(frozen=True)
class HttpResponse:
    status: int
    headers: httpx.Headers
    body: bytes


def _too_large() -> WireFailure:
    return WireFailure(
        RuntimeFailureCode.INVALID_RESPONSE,
        f"response body exceeds {MAX_RESPONSE_BYTES} bytes",
    )


def _timeout(timeout_s: float) -> WireFailure:
    return WireFailure(
        RuntimeFailureCode.TIMEOUT, f"model call exceeded its {timeout_s:g} s deadline"
    )


def post_bounded(
    client: httpx.Client,
    url: httpx.URL | str,
    *,
    content: bytes,
    headers: dict[str, str],
    timeout_s: float,
    max_bytes: int = MAX_RESPONSE_BYTES,
) -> HttpResponse:
    """POST and read the response incrementally, within ``timeout_s`` and ``max_bytes``.

    The deadline covers the whole round trip: with a ``DeadlineTransport`` underneath,
    every socket operation gets only what is left of it (see ``deadline``); the body loop
    also checks it between reads, so even without one a trickled body cannot evade it.
    The body is abandoned past ``max_bytes`` (decoded), whatever ``Content-Length`` says.
    """
    timeout = httpx.Timeout(timeout_s)
    try:
        with (
            deadline(timeout_s) as at,
            client.stream("POST", url, content=content, headers=headers, timeout=timeout) as resp,
        ):
            declared = resp.headers.get("content-length")
            if declared is not None and declared.isdigit() and int(declared) > max_bytes:
                raise _too_large()
            buffer = bytearray()
            for chunk in resp.iter_bytes():
                buffer += chunk
                if len(buffer) > max_bytes:
                    raise _too_large()
                if time.monotonic() > at:
                    raise _timeout(timeout_s)
            return HttpResponse(resp.status_code, resp.headers, bytes(buffer))
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
