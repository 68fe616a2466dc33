"""A loopback OpenAI-compatible server (127.0.0.1) for tests and the recording scripts.

A ``responder`` maps each request to a ``Reply``, which can misbehave on purpose (trickle,
hang, reset mid-body, lie about length) over real sockets.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

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
    peer_port: int = 0  # the client's end of the connection

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
    message = {"role": "assistant", "content": text, "refusal": None, **(message_extra or {})}
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": 1_767_225_600,
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
        "usage": dict(usage or {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}),
    }


Responder = Callable[[ServerRequest], Reply]


class _Handler(BaseHTTPRequestHandler):
    server: LoopbackModelServer
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # no 40 ms delayed-ACK stalls on loopback

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {name.lower(): value for name, value in self.headers.items()}
        request = ServerRequest(self.command, self.path, headers, body, self.client_address[1])
        with self.server.lock:
            self.server.received.append(request)
        self._send(self.server.responder(request))

    do_GET = do_POST

    def _trickle(self, data: bytes, pause_s: float) -> None:
        for index in range(len(data)):
            self.wfile.write(data[index : index + 1])
            self.wfile.flush()
            if not self.server.sleep(pause_s):
                break

    def _chunk(self, piece: bytes) -> None:
        self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))

    def _send(self, reply: Reply) -> None:
        if reply.hang_s is not None:
            self.server.sleep(reply.hang_s)
            self.close_connection = True
            return
        if reply.trickle_headers_s is not None:
            head = f"HTTP/1.1 {reply.status} OK\r\ncontent-length: {len(reply.body)}\r\n\r\n"
            self._trickle(head.encode(), reply.trickle_headers_s)
            self.close_connection = True
            return
        self.send_response_only(reply.status, reply.reason)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.chunked or reply.pieces is not None:
            self.send_header("transfer-encoding", "chunked")
        elif not reply.omit_length:
            length = len(reply.body) if reply.declared_length is None else reply.declared_length
            self.send_header("content-length", str(length))
        if reply.pieces is None and (reply.omit_length or reply.reset_after is not None):
            self.send_header("connection", "close")
            self.close_connection = True
        self.end_headers()
        body = reply.body if reply.reset_after is None else reply.body[: reply.reset_after]
        try:
            if reply.pieces is not None:
                for piece in reply.pieces:
                    if isinstance(piece, float):
                        if not self.server.sleep(piece):
                            break
                    elif piece:
                        self._chunk(piece)
                        self.wfile.flush()
                        with self.server.lock:
                            self.server.bytes_sent += len(piece)
            elif reply.chunked:
                for start in range(0, len(body), 64 * 1024):
                    self._chunk(body[start : start + 64 * 1024])
            elif reply.trickle_s is not None:
                self._trickle(body, reply.trickle_s)
            else:
                self.wfile.write(body)
            if (reply.chunked or reply.pieces is not None) and reply.reset_after is None:
                self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            if reply.pieces is not None:
                with self.server.lock:
                    self.server.aborted += 1
            self.close_connection = True
            return
        if reply.reset_after is not None:  # SO_LINGER 0 turns close() into a TCP RST
            self.connection.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            self.close_connection = True


class LoopbackModelServer(ThreadingHTTPServer):
    """A server on 127.0.0.1; ``base_url`` ends in ``/v1``. ``bytes_sent``: body bytes of
    streamed (``pieces``) replies written; ``aborted``: those the client hung up on."""

    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = 128

    def __init__(self, responder: Responder, port: int = 0) -> None:
        super().__init__(("127.0.0.1", port), _Handler)
        self.responder = responder
        self.received: list[ServerRequest] = []
        self.lock, self.stopping = threading.Lock(), threading.Event()
        self.bytes_sent = self.aborted = 0
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    @property
    def requests(self) -> list[ServerRequest]:
        return list(self.received)

    def set_responder(self, responder: Responder) -> None:
        self.responder = responder

    def sleep(self, seconds: float) -> bool:
        """Sleep unless the server is stopping; False when interrupted."""
        return not self.stopping.wait(seconds)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # Clients abandoning a connection are what this server exists for: no traceback.
        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            super().handle_error(request, client_address)

    def start(self) -> Self:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.shutdown()
        self.server_close()
        self._thread.join(timeout=5)


@contextmanager
def serve(responder: Responder, port: int = 0) -> Iterator[LoopbackModelServer]:
    server = LoopbackModelServer(responder, port).start()
    try:
        yield server
    finally:
        server.stop()
