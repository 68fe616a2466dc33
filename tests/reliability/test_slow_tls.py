"""The round trip's deadline holds while TLS never completes: a server that accepts and
says nothing, or drips a handshake record a byte at a time."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureCode, RuntimeFailureError
from tests.conftest import BOTH_IO, RuntimeFactory

pytestmark = BOTH_IO


@contextmanager
def stalled_tls(drip: bool) -> Iterator[int]:
    """A port whose connections never finish a TLS handshake."""
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    stop = threading.Event()

    def serve(conn: socket.socket) -> None:
        with conn:
            try:
                if drip:  # a ServerHello record's header, then its body a byte at a time
                    conn.sendall(b"\x16\x03\x03\x40\x00")
                while not stop.wait(0.05):
                    if drip:
                        conn.sendall(b"\x02")
            except OSError:
                pass

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            threading.Thread(target=serve, args=(conn,), daemon=True).start()

    threading.Thread(target=accept, daemon=True).start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        stop.set()
        listener.close()


@pytest.mark.parametrize("drip", [False, True], ids=["silent", "dripping"])
def test_a_stalled_tls_handshake_ends_at_the_deadline(
    drip: bool, make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with stalled_tls(drip) as port:
        base_url = f"https://127.0.0.1:{port}/v1"
        runtime = make_runtime(timeout_s=0.5, tracing=False, base_url=base_url)
        started = time.monotonic()
        with pytest.raises(RuntimeFailureError) as raised:
            runtime.execute(greeting_request)
        elapsed = time.monotonic() - started
    assert raised.value.failure.code is RuntimeFailureCode.TIMEOUT
    assert elapsed < 1.5
