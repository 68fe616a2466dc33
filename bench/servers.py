"""Benchmark servers, each run in its own process: a fast OpenAI-compatible endpoint and
a Langfuse OTLP sink. Plain asyncio protocols with prebuilt responses: the point is to
cost the client as little as possible, so the clients' overheads are what gets measured.

    python bench/servers.py model PORT_FILE [--delay SECONDS]
    python bench/servers.py sink PORT_FILE [--hang]
"""

from __future__ import annotations

import asyncio
import gzip
import json
import sys
from pathlib import Path

CONTENT = json.dumps({"greeting": "Hello Ryan"})
COMPLETION = json.dumps(
    {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1767225600,
        "model": "bench-model",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": CONTENT, "refusal": None},
            }
        ],
        "usage": {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27},
    }
).encode()


def http_response(body: bytes, content_type: str = "application/json") -> bytes:
    head = (
        f"HTTP/1.1 200 OK\r\ncontent-type: {content_type}\r\n"
        f"content-length: {len(body)}\r\nconnection: keep-alive\r\n\r\n"
    )
    return head.encode() + body


MODEL_REPLY = http_response(COMPLETION)


class HttpProtocol(asyncio.Protocol):
    """Minimal HTTP/1.1 keep-alive request framing (Content-Length bodies only)."""

    def __init__(self, handle: object) -> None:
        self.handle = handle
        self.buffer = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end]).decode("latin-1")
            length = 0
            encoding = ""
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name.lower() == "content-length":
                    length = int(value.strip())
                elif name.lower() == "content-encoding":
                    encoding = value.strip()
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4 : end + 4 + length])
            del self.buffer[: end + 4 + length]
            reply = self.handle(head, body, encoding)  # type: ignore[operator]
            if reply is not None:
                self.transport.write(reply)  # type: ignore[attr-defined]


class SinkState:
    """Counts what a Langfuse would receive: OTLP spans (protobuf or JSON) and scores."""

    def __init__(self) -> None:
        self.spans = 0
        self.exports = 0
        self.scores = 0

    def handle(self, head: str, body: bytes, encoding: str) -> bytes:
        if head.startswith("GET /count"):
            counts = {"spans": self.spans, "exports": self.exports, "scores": self.scores}
            return http_response(json.dumps(counts).encode())
        if head.startswith("POST /reset"):
            self.spans = self.exports = self.scores = 0
            return http_response(b"{}")
        if encoding == "gzip":
            body = gzip.decompress(body)
        if head.startswith("POST /api/public/scores"):
            data = json.loads(body)
            self.scores += len(data) if isinstance(data, list) else 1
            return http_response(b"{}")
        if head.startswith("POST /api/public/ingestion"):
            batch = json.loads(body)["batch"]
            self.scores += sum(1 for event in batch if event["type"] == "score-create")
            return http_response(b'{"successes": [], "errors": []}')
        self.exports += 1
        if "application/json" in head.lower():
            export = json.loads(body)
            self.spans += sum(
                len(s["spans"]) for r in export["resourceSpans"] for s in r["scopeSpans"]
            )
            return http_response(b"{}")
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
            ExportTraceServiceRequest,
        )

        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        self.spans += sum(len(s.spans) for r in export.resource_spans for s in r.scope_spans)
        return http_response(b"", "application/x-protobuf")


class DelayedProtocol(HttpProtocol):
    """Answers each request after ``delay`` seconds (a slow upstream), without blocking."""

    delay = 0.0

    def data_received(self, data: bytes) -> None:
        loop = asyncio.get_running_loop()
        self.buffer += data
        while (end := self.buffer.find(b"\r\n\r\n")) >= 0:
            head = bytes(self.buffer[:end]).decode("latin-1").lower()
            length = 0
            for line in head.split("\r\n")[1:]:
                name, _, value = line.partition(":")
                if name == "content-length":
                    length = int(value.strip())
            if len(self.buffer) < end + 4 + length:
                return
            del self.buffer[: end + 4 + length]
            loop.call_later(self.delay, self._reply)

    def _reply(self) -> None:
        if not self.transport.is_closing():  # type: ignore[attr-defined]
            self.transport.write(MODEL_REPLY)  # type: ignore[attr-defined]


async def main(kind: str, port_file: Path, hang: bool, delay: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    if kind == "model" and delay > 0:
        DelayedProtocol.delay = delay
        server = await loop.create_server(
            lambda: DelayedProtocol(None), "127.0.0.1", 0, backlog=4096
        )
        port_file.write_text(str(server.sockets[0].getsockname()[1]))
        async with server:
            await server.serve_forever()
    if kind == "model":
        handler = lambda head, body, encoding: MODEL_REPLY  # noqa: E731
    else:
        state = SinkState()
        handler = state.handle
        if hang:

            def hanging(head: str, body: bytes, encoding: str) -> bytes | None:
                return state.handle(head, body, encoding) if head.startswith("GET") else None

            handler = hanging
    server = await loop.create_server(lambda: HttpProtocol(handler), "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    port_file.write_text(str(port))
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    delay = float(sys.argv[sys.argv.index("--delay") + 1]) if "--delay" in sys.argv else 0.0
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), "--hang" in sys.argv, delay))
