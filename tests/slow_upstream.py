"""A loopback OpenAI-compatible upstream that answers each call after a delay, without a
thread per connection (an asyncio server on its own thread), counting calls in flight.

For concurrency tests: ``ThreadingHTTPServer`` accepts five connections at a time and
spends a thread per call, so it cannot tell 6 calls in flight from 600.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from tests.loopback import chat_completion


@dataclass
class Upstream:
    base_url: str = ""
    delay_s: float = 0.3
    in_flight: int = 0
    max_in_flight: int = 0
    calls: int = 0
    connections: int = 0
    closed: int = 0  # connections the client closed
    #: "echo": answer with the request's last message (tells callers' answers apart).
    echo: bool = True
    bodies: list[bytes] = field(default_factory=list)


#: Each upstream's open connections, by the upstream's id.
_OPEN: dict[int, set[asyncio.Transport]] = {}


class _Protocol(asyncio.Protocol):
    def __init__(self, upstream: Upstream) -> None:
        self.upstream = upstream
        self.buffer = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.upstream.connections += 1
        _OPEN.setdefault(id(self.upstream), set()).add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self.upstream.closed += 1
        _OPEN.get(id(self.upstream), set()).discard(self.transport)  # type: ignore[arg-type]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.buffer[:end]).decode("latin-1").lower()
            length = next(
                (
                    int(line.partition(":")[2])
                    for line in head.split("\r\n")[1:]
                    if line.startswith("content-length:")
                ),
                0,
            )
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            up = self.upstream
            up.calls += 1
            up.in_flight += 1
            up.max_in_flight = max(up.max_in_flight, up.in_flight)
            asyncio.get_running_loop().call_later(up.delay_s, self._reply, body)

    def _reply(self, body: bytes) -> None:
        self.upstream.in_flight -= 1
        if self.transport is None or self.transport.is_closing():
            return
        said = json.loads(body)["messages"][-1]["content"] if self.upstream.echo else "x"
        payload = json.dumps(chat_completion({"greeting": said})).encode()
        self.transport.write(
            b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(payload)}\r\n\r\n".encode()
            + payload
        )


@contextmanager
def slow_upstream(delay_s: float = 0.3) -> Iterator[Upstream]:
    """Serve on 127.0.0.1 until the block ends."""
    upstream = Upstream(delay_s=delay_s)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    stop: asyncio.Future[None] | None = None

    async def serve() -> None:
        nonlocal stop
        server = await loop.create_server(lambda: _Protocol(upstream), "127.0.0.1", 0, backlog=4096)
        upstream.base_url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        stop = loop.create_future()
        ready.set()
        try:
            await stop
        finally:
            # Since 3.12 a server's wait_closed() waits for its connections: a client's
            # idle keep-alive ones are aborted, so the server always stops.
            server.close()
            for transport in list(_OPEN.pop(id(upstream), ())):
                transport.abort()
            await asyncio.wait_for(server.wait_closed(), 5)

    thread = threading.Thread(target=loop.run_until_complete, args=(serve(),), daemon=True)
    thread.start()
    assert ready.wait(10), "slow upstream did not start"
    try:
        yield upstream
    finally:
        assert stop is not None
        loop.call_soon_threadsafe(stop.set_result, None)
        thread.join(10)
        loop.close()
