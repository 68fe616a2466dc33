"""A loopback server that writes exactly the bytes a test scripts, framing included.

``http.server`` cannot send a 204 with a body, a malformed status line or a response
followed by a second one; hostile-provider tests need all of those. Each request is
parsed just enough to know where it ends; the ``respond`` callback returns the raw bytes
to send (``None`` closes the connection without a word). Every request is recorded with
the client port it arrived from, so a test can tell which connection carried it.

A reply is bytes, or a sequence of steps: bytes to send, a float to pause (seconds),
``None`` to close the connection there.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class RawRequest:
    client_port: int
    index_on_connection: int
    head: bytes
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


Step = bytes | float | None
Respond = Callable[[RawRequest], bytes | Sequence[Step] | None]


def http_response(
    status: int,
    body: bytes = b"",
    headers: list[tuple[str, str]] | None = None,
    *,
    reason: str = "OK",
    length: bool = True,
) -> bytes:
    """Serialize a response; ``length=False`` leaves Content-Length to the caller."""
    lines = [f"HTTP/1.1 {status} {reason}".rstrip()]
    lines += [f"{name}: {value}" for name, value in headers or []]
    if length:
        lines.append(f"content-length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _read_request(conn: socket.socket, buffer: bytearray) -> tuple[bytes, bytes] | None:
    while b"\r\n\r\n" not in buffer:
        data = conn.recv(65536)
        if not data:
            return None
        buffer += data
    head, _, rest = bytes(buffer).partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    while len(rest) < length:
        data = conn.recv(65536)
        if not data:
            return None
        rest += data
    buffer[:] = rest[length:]
    return head, rest[:length]


class RawServer:
    def __init__(self, respond: Respond) -> None:
        self.respond = respond
        self.requests: list[RawRequest] = []
        self._lock = threading.Lock()
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._conns: list[socket.socket] = []
        self._accepting = threading.Thread(target=self._accept, daemon=True)

    @property
    def port(self) -> int:
        return int(self._listener.getsockname()[1])

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except OSError:
                continue
            conn.settimeout(10)
            self._conns.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: socket.socket) -> None:
        port = conn.getpeername()[1]
        buffer = bytearray()
        index = 0
        try:
            while not self._stop.is_set():
                parsed = _read_request(conn, buffer)
                if parsed is None:
                    return
                request = RawRequest(port, index, *parsed)
                index += 1
                with self._lock:
                    self.requests.append(request)
                reply = self.respond(request)
                steps: Sequence[Step] = [reply] if isinstance(reply, bytes | None) else reply
                for step in steps:
                    if step is None:
                        return
                    if isinstance(step, float):
                        if self._stop.wait(step):
                            return
                    else:
                        conn.sendall(step)
        except OSError:
            return
        finally:
            conn.close()

    def start(self) -> RawServer:
        self._accepting.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._accepting.join(2)
        for conn in self._conns:
            with suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for thread in self._threads:
            thread.join(2)
        self._listener.close()


@contextmanager
def raw_server(respond: Respond) -> Iterator[RawServer]:
    server = RawServer(respond).start()
    try:
        yield server
    finally:
        server.stop()
