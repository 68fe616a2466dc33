"""Lines the MCP SDK cannot parse get whatever the SDK answers, and the server stays up.

The SDK's client cannot send these (it refuses a lone surrogate), so the test speaks
JSON-RPC lines to ``templiqx mcp`` itself; every wait is bounded.
"""

from __future__ import annotations

import json
import os
import select
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.mcp.test_mcp_server import TEMPLIQX, clean_env

DEADLINE = 20.0  # seconds for any one answer (a cold start on a loaded machine included)


class Client:
    """A line-oriented JSON-RPC client on a ``templiqx mcp`` subprocess."""

    def __init__(self, proc: subprocess.Popen[bytes]) -> None:
        self.proc = proc
        self.pending = b""

    def send(self, line: bytes) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()

    def answer(self, request_id: int | str | None) -> dict[str, Any]:
        """The next message with ``request_id`` (notifications skipped; ``None`` is the
        null id of an error about a request whose id could not be determined)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        end = time.monotonic() + DEADLINE
        while True:
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                message = json.loads(line)
                if "id" in message and message["id"] == request_id:
                    return dict(message)
            left = end - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(left, 0))
            if not ready:
                pytest.fail(f"no answer to request {request_id} within {DEADLINE} s")
            chunk = os.read(fd, 1 << 16)
            if not chunk:
                pytest.fail(f"server closed stdout before answering request {request_id}")
            self.pending += chunk


@pytest.fixture
def client() -> Iterator[Client]:
    proc = subprocess.Popen(
        [TEMPLIQX, "mcp", "--runtime", "scripted"],
        cwd=REPO_ROOT,
        env=clean_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    speaker = Client(proc)
    try:
        speaker.send(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": 0,
                    "method": "initialize",
                    "params": {
                        "protocolVersion": "2025-03-26",
                        "capabilities": {},
                        "clientInfo": {"name": "test", "version": "1"},
                    },
                }
            ).encode()
        )
        assert "result" in speaker.answer(0)
        speaker.send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}')
        yield speaker
    finally:
        if proc.poll() is None:
            assert proc.stdin is not None
            proc.stdin.close()
            try:
                proc.wait(timeout=DEADLINE)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        assert proc.stderr is not None
        stderr = proc.stderr.read().decode()
        proc.stdout.close()  # type: ignore[union-attr]
        proc.stderr.close()
        assert "Traceback" not in stderr


def tools_call(request_id: int, inputs: bytes) -> bytes:
    """A ``compile_contract`` call whose ``inputs.name`` is the raw JSON ``inputs``."""
    return (
        b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"compile_contract",'
        b'"arguments":{"contract":"examples/greeting.yaml","inputs":{"name":%s},'
        b'"context":{"organization":"Blinqx"}}}}' % (request_id, inputs)
    )


def assert_serving(client: Client, request_id: int) -> None:
    client.send(b'{"jsonrpc":"2.0","id":%d,"method":"tools/list"}' % request_id)
    tools = client.answer(request_id)["result"]["tools"]
    assert {t["name"] for t in tools} == {"compile_contract", "execute_contract"}


#: Lines no JSON-RPC request can be read from, each followed by a ping that must be answered.
MALFORMED = [
    b"not json at all",
    b'{"jsonrpc":"2.0","id":14,"method":"ping"',  # truncated
    b'{"jsonrpc":"2.0","id":"s\\ud800","method":"ping"}',  # an id that cannot be echoed
    b'{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"cursor":"\\ud800"}}',
    tools_call(7, b"[" * 100_000 + b"]" * 100_000),  # nesting no parser follows
    b'[{"jsonrpc":"2.0","id":12,"method":"ping"}]',  # a batch (not part of MCP)
    b'{"jsonrpc":"2.0","id":true,"method":"ping"}',
    b'{"jsonrpc":"2.0","id":9,"method":5}',
    b"5",
    b"",
]


def test_malformed_lines_leave_the_server_serving(client: Client) -> None:
    for number, line in enumerate(MALFORMED, start=100):
        client.send(line)
        client.send(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % number)
        assert client.answer(number)["result"] == {}, line[:80]
    assert_serving(client, 1)


def test_a_well_formed_deep_call_still_reaches_the_tool(client: Client) -> None:
    """Depth the SDK accepts goes to the tool (a schema diagnostic, not a refusal)."""
    client.send(tools_call(3, b"[" * 150 + b"]" * 150))
    result = client.answer(3)["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["diagnostics"][0]["code"] == "TQX_VALUE_SCHEMA"
