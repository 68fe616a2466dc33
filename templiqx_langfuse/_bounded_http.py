"""httpx transports that read at most ``limit`` bytes of an answer, undecoded.

Langfuse's generated API client reads every answer whole, and a broken server or proxy
may stream without end or send a compression bomb: past ``limit`` the rest is never read
(the connection closes), and the body is handed on as sent, never inflated (a compressed
or cut answer then fails to parse, a typed error where it is used).
"""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["AsyncBoundedTransport", "BoundedTransport"]

_DROPPED = {b"content-length", b"content-encoding"}


def _bounded(response: httpx.Response, body: bytes, limit: int) -> httpx.Response:
    headers = [(k, v) for k, v in response.headers.raw if k.lower() not in _DROPPED]
    return httpx.Response(response.status_code, headers=headers, content=body[:limit])


class BoundedTransport(httpx.HTTPTransport):
    def __init__(self, limit: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = limit

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        body = bytearray()
        try:
            for piece in response.stream:  # type: ignore[union-attr]
                body += piece
                if len(body) > self.limit:
                    break
        finally:
            response.close()
        return _bounded(response, bytes(body), self.limit)


class AsyncBoundedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, limit: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = limit

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(request)
        body = bytearray()
        try:
            async for piece in response.stream:  # type: ignore[union-attr]
                body += piece
                if len(body) > self.limit:
                    break
        finally:
            await response.aclose()
        return _bounded(response, bytes(body), self.limit)
