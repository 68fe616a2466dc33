"""httpx transports that read at most ``limit`` bytes of an answer, undecoded, for Langfuse's
generated API client, which reads every answer whole: a broken server or proxy may stream
without end. Requests ask for ``identity``; a cut or compressed body then fails to parse."""

from __future__ import annotations

from typing import Any

import httpx


class _Limited:
    def __init__(self, limit: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.limit = limit

    def _bounded(self, response: httpx.Response, body: bytearray) -> httpx.Response:
        dropped = (b"content-length", b"content-encoding")
        headers = [(k, v) for k, v in response.headers.raw if k.lower() not in dropped]
        return httpx.Response(
            response.status_code, headers=headers, content=bytes(body[: self.limit])
        )


class BoundedTransport(_Limited, httpx.HTTPTransport):
    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["accept-encoding"] = "identity"
        response, body = super().handle_request(request), bytearray()
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
        request.headers["accept-encoding"] = "identity"
        response, body = await super().handle_async_request(request), bytearray()
        try:
            async for piece in response.aiter_raw():
                body += piece
                if len(body) > self.limit:
                    break
        finally:
            await response.aclose()
        return self._bounded(response, body)
