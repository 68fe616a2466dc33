"""httpx transports that read at most ``limit`` bytes of an answer, undecoded: Langfuse's
generated API client reads every answer whole, and a broken server or proxy may stream
without end or send a compression bomb. Every request asks for ``identity`` (httpx's own
default asks for gzip, which this body would pass on undecoded). Past ``limit`` the
connection closes; the body goes on as sent (a cut or compressed one then fails to parse,
typed)."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["AsyncBoundedTransport", "BoundedTransport"]


class _Limited:
    def __init__(self, limit: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = limit

    @staticmethod
    def _identity(request: httpx.Request) -> httpx.Request:
        request.headers["accept-encoding"] = "identity"
        return request

    def _bounded(self, response: httpx.Response, body: bytearray) -> httpx.Response:
        dropped = (b"content-length", b"content-encoding")
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in dropped]
        return httpx.Response(
            response.status_code, headers=headers, content=bytes(body[: self.limit])
        )


class BoundedTransport(_Limited, httpx.HTTPTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response, body = super().handle_request(self._identity(request)), bytearray()
        try:
            for piece in response.iter_raw():
                body += piece
                if len(body) > self.limit:
                    break
        finally:
            response.close()
        return self._bounded(response, body)


class AsyncBoundedTransport(_Limited, httpx.AsyncHTTPTransport):
    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await super().handle_async_request(self._identity(request))
        body = bytearray()
        try:
            async for piece in response.aiter_raw():
                body += piece
                if len(body) > self.limit:
                    break
        finally:
            await response.aclose()
        return self._bounded(response, body)
