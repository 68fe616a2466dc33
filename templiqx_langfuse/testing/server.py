"""A loopback OpenAI-compatible server for tests, recordings and benchmarks.

Binds 127.0.0.1 only. A ``responder`` maps each parsed request to a ``Reply``; replies
can also misbehave on purpose (trickle, hang, reset mid-body, lie about length), which
is how the fault matrix is exercised with real sockets instead of mocks.

``python -m templiqx_langfuse.testing.server --content JSON [--port N]`` serves every
chat-completions call with ``JSON`` as the model's content until interrupted — a provider
to record cassettes against (``pytest --record-mode=once``) with no key and no network.
"""

from __future__ import annotations

import argparse
import json
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "LoopbackModelServer",
    "Reply",
    "ServerRequest",
    "chat_completion",
    "json_reply",
    "serve",
]


@dataclass(frozen=True)
class ServerRequest:
    """A received request; header names are lower-cased."""

    method: str
    path: str
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    reason: str | None = None
    chunked: bool = False
    declared_length: int | None = None  # Content-Length to claim (default: the truth)
    omit_length: bool = False  # no Content-Length: the body ends when the connection closes
    trickle_s: float | None = None  # send the body one byte at a time with this pause
    trickle_headers_s: float | None = None  # send the status line and headers that way too
    hang_s: float | None = None  # accept, read the request, then say nothing this long
    reset_after: int | None = None  # send this many body bytes, then reset the connection
    # Streamed replies: one HTTP chunk per bytes piece, flushed; a float pauses that long.
    # With reset_after set, the connection is reset after the pieces instead of ended.
    pieces: tuple[bytes | float, ...] | None = None


def json_reply(data: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Reply:
    merged = {"content-type": "application/json", **(headers or {})}
    return Reply(status=status, headers=merged, body=json.dumps(data).encode())


def chat_completion(
    content: Any,
    *,
    finish_reason: str = "stop",
    model: str = "loopback-model",
    usage: Mapping[str, Any] | None = None,
    response_id: str = "chatcmpl-loopback",
    message_extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A chat.completion body whose ``content`` is the JSON text of ``content``."""
    text = content if isinstance(content, str) or content is None else json.dumps(content)
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    **(message_extra or {}),
                },
                "finish_reason": finish_reason,
            }
        ],
        "usage": dict(usage or {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}),
    }


Responder = Callable[[ServerRequest], Reply]


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls on loopback

    def log_message(self, format: str, *args: Any) -> None:
        return  # quiet: tests read assertions, not access logs

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = ServerRequest(self.command, self.path, headers, body)
        self.server.record(request)
        self._send(self.server.responder(request))

    do_GET = do_POST

    def _send(self, reply: Reply) -> None:
        if reply.hang_s is not None:
            self.server.sleep(reply.hang_s)
            self.close_connection = True
            return
        if reply.trickle_headers_s is not None:
            head = f"HTTP/1.1 {reply.status} OK\r\ncontent-length: {len(reply.body)}\r\n\r\n"
            for byte in head.encode():
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                if not self.server.sleep(reply.trickle_headers_s):
                    break
            self.close_connection = True
            return
        self.send_response_only(reply.status, reply.reason)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.pieces is not None:
            self._send_pieces(reply)
            return
        if reply.chunked:
            self.send_header("transfer-encoding", "chunked")
        elif not reply.omit_length:
            length = len(reply.body) if reply.declared_length is None else reply.declared_length
            self.send_header("content-length", str(length))
        if reply.omit_length or reply.reset_after is not None:
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        body = reply.body if reply.reset_after is None else reply.body[: reply.reset_after]
        try:
            if reply.chunked:
                for start in range(0, len(body), 64 * 1024):
                    piece = body[start : start + 64 * 1024]
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                if reply.reset_after is None:
                    self.wfile.write(b"0\r\n\r\n")
            elif reply.trickle_s is not None:
                for index in range(len(body)):
                    self.wfile.write(body[index : index + 1])
                    self.wfile.flush()
                    if not self.server.sleep(reply.trickle_s):
                        break
            else:
                self.wfile.write(body)
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        if reply.reset_after is not None:
            self._reset()
        if reply.omit_length:
            self.close_connection = True

    def _reset(self) -> None:
        # SO_LINGER 0 turns close() into a TCP RST: a reset mid-body.
        self.connection.setsockopt(
            socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
        )
        self.close_connection = True

    def _send_pieces(self, reply: Reply) -> None:
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        assert reply.pieces is not None
        try:
            for piece in reply.pieces:
                if isinstance(piece, float):
                    if not self.server.sleep(piece):
                        break
                elif piece:
                    self.wfile.write(f"{len(piece):x}\r\n".encode() + piece + b"\r\n")
                    self.wfile.flush()
                    self.server.count_sent(len(piece))
            if reply.reset_after is None:
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.server.count_aborted()
            self.close_connection = True
            return
        if reply.reset_after is not None:
            self._reset()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, responder: Responder, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.responder = responder
        self.requests: list[ServerRequest] = []
        self._lock = threading.Lock()
        self.stopping = threading.Event()
        self.bytes_sent = 0  # body bytes of streamed (pieces) replies written so far
        self.aborted = 0  # streamed replies the client hung up on

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients that abandon a connection (oversize body, deadline) are part of the
        # scenarios this server exists for: not worth a traceback on stderr.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)

    def record(self, request: ServerRequest) -> None:
        with self._lock:
            self.requests.append(request)

    def count_sent(self, n: int) -> None:
        with self._lock:
            self.bytes_sent += n

    def count_aborted(self) -> None:
        with self._lock:
            self.aborted += 1

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; False when interrupted."""
        return not self.stopping.wait(seconds)


class LoopbackModelServer:
    """A running server; ``base_url`` ends in ``/v1`` like a real provider's."""

    def __init__(self, responder: Responder, port: int = 0) -> None:
        self._server = _Server(responder, port)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[ServerRequest]:
        return list(self._server.requests)

    @property
    def bytes_sent(self) -> int:
        """Body bytes of streamed replies written so far."""
        return self._server.bytes_sent

    @property
    def aborted(self) -> int:
        """Streamed replies the client hung up on (a write failed)."""
        return self._server.aborted

    def set_responder(self, responder: Responder) -> None:
        self._server.responder = responder

    def start(self) -> LoopbackModelServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


@contextmanager
def serve(responder: Responder, port: int = 0) -> Iterator[LoopbackModelServer]:
    server = LoopbackModelServer(responder, port).start()
    try:
        yield server
    finally:
        server.stop()


def _main(argv: list[str] | None = None) -> int:
    """Serve until SIGINT/SIGTERM; the first line on stdout is the base URL to use."""
    parser = argparse.ArgumentParser(
        prog="python -m templiqx_langfuse.testing.server",
        description="A loopback OpenAI-compatible provider (127.0.0.1) for recording cassettes.",
    )
    parser.add_argument(
        "--content",
        required=True,
        help='JSON every completion carries, e.g. \'{"greeting": "Hi"}\'',
    )
    parser.add_argument("--port", type=int, default=0, help="port (default: a free one)")
    args = parser.parse_args(argv)
    try:
        content = json.loads(args.content)
    except ValueError:
        parser.error("--content must be JSON")
    reply = json_reply(chat_completion(content))
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with serve(lambda _request: reply, args.port) as server:
        print(f"TEMPLIQX_MODEL_BASE_URL={server.base_url}", flush=True)
        stop.wait()
        print(f"served {len(server.requests)} request(s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(_main())
