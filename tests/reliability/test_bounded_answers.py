"""Langfuse's API client reads every answer whole: its transport (``max_bytes``) reads at most
that much of one, undecoded, however long the server streams or whatever it compressed."""

from __future__ import annotations

import asyncio
import gzip
from collections.abc import Sequence

import httpx
import pytest

from templiqx_langfuse import AsyncDeadlineTransport, DeadlineTransport
from tests.raw_http import RawRequest, Step, raw_server

LIMIT = 4096
CHUNK = b"%x\r\n%s\r\n" % (65536, b"x" * 65536)
GZIPPED = gzip.compress(b'{"a": 1}', mtime=0)


def endless(request: RawRequest) -> Sequence[Step]:
    """A chunked body of 64 MiB that a plain client would hold whole."""
    assert b"accept-encoding: identity" in request.head.lower()
    return [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n", *[CHUNK] * 1024]


def compressed(request: RawRequest) -> bytes:
    head = b"HTTP/1.1 200 OK\r\ncontent-encoding: gzip\r\ncontent-length: %d\r\n\r\n"
    return head % len(GZIPPED) + GZIPPED


def fetch(url: str, asynchronous: bool) -> httpx.Response:
    if not asynchronous:
        with httpx.Client(transport=DeadlineTransport(max_bytes=LIMIT)) as client:
            return client.get(url)

    async def get() -> httpx.Response:
        async with httpx.AsyncClient(transport=AsyncDeadlineTransport(max_bytes=LIMIT)) as client:
            return await client.get(url)

    return asyncio.run(get())


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_an_endless_answer_is_cut_at_the_bound(asynchronous: bool) -> None:
    with raw_server(endless) as server:
        response = fetch(server.base_url, asynchronous)
    assert response.content == b"x" * LIMIT


@pytest.mark.parametrize("asynchronous", [False, True], ids=["sync", "async"])
def test_a_compressed_answer_is_passed_on_undecoded(asynchronous: bool) -> None:
    with raw_server(compressed) as server:
        response = fetch(server.base_url, asynchronous)
    assert response.content == GZIPPED
    assert "content-encoding" not in response.headers
