"""Requests the MCP SDK cannot parse still get an answer, through a real stdio server.

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


@pytest.mark.parametrize(
    "inputs",
    [
        pytest.param(b'"\\ud800"', id="lone-surrogate"),
        pytest.param(b'"ok \\udfff then"', id="lone-low-surrogate"),
        pytest.param(b"[" * 250 + b"]" * 250, id="250-deep"),
        pytest.param(b"[" * 100_000 + b"]" * 100_000, id="100000-deep"),
    ],
)
def test_unparsable_tool_call_gets_a_tool_error_and_the_server_goes_on(
    client: Client, inputs: bytes
) -> None:
    client.send(tools_call(7, inputs))
    result = client.answer(7)["result"]
    assert result["isError"] is True
    text = result["content"][0]["text"]
    assert text.startswith("TQX_DATA_INVALID: ")
    assert result["structuredContent"]["error"]["code"] == "TQX_DATA_INVALID"
    assert_serving(client, 8)


def test_a_well_formed_deep_call_still_reaches_the_tool(client: Client) -> None:
    """Depth the SDK accepts goes to the tool as before (a schema diagnostic, not a refusal)."""
    client.send(tools_call(3, b"[" * 150 + b"]" * 150))
    result = client.answer(3)["result"]
    assert result["isError"] is False
    assert result["structuredContent"]["diagnostics"][0]["code"] == "TQX_VALUE_SCHEMA"


def test_other_methods_get_a_json_rpc_error_with_the_code(client: Client) -> None:
    client.send(b'{"jsonrpc":"2.0","id":"s-1","method":"tools/list","params":{"cursor":"\\ud800"}}')
    error = client.answer("s-1")["error"]
    assert error["code"] == -32700  # parse error
    assert error["message"].startswith("TQX_DATA_INVALID: ")
    client.send(b'{"jsonrpc":"1.0","id":5,"method":"tools/list"}')
    error = client.answer(5)["error"]
    assert error["code"] == -32600  # invalid request
    assert error["message"].startswith("TQX_DATA_INVALID: ")
    assert_serving(client, 6)


def test_lines_without_an_id_are_skipped_and_the_server_goes_on(client: Client) -> None:
    client.send(b'{"jsonrpc":"2.0","method":"notifications/x","params":{"a":"\\ud800"}}')
    client.send(b"")
    assert_serving(client, 9)


def test_an_id_that_cannot_be_echoed_is_answered_as_null(client: Client) -> None:
    """A string id with a lone surrogate cannot be written back as UTF-8 JSON."""
    client.send(b'{"jsonrpc":"2.0","id":"s\\ud800","method":"ping"}')
    error = client.answer(None)["error"]
    assert error["code"] == -32700
    assert error["message"].startswith("TQX_DATA_INVALID: ")
    client.send(b'{"jsonrpc":"2.0","id":"t\\udfff","method":"tools/call","params":{}}')
    assert client.answer(None)["error"]["code"] == -32700
    client.send(b'{"jsonrpc":"2.0","id":4,"method":"p\\ud800"}')
    assert client.answer(4)["error"]["code"] == -32700
    assert_serving(client, 5)


# JSON-RPC 2.0 §5.1: not JSON is a parse error, anything else not a request an invalid
# request; the id is null when it could not be determined (or is not a valid id).
BAD_LINES = [
    (
        "bad escape before the id",
        b'{"jsonrpc":"2.0","method":"ping","params":{"x":"\\q"},"id":41}',
        None,
        -32700,
    ),
    (
        "control char before the id",
        b'{"jsonrpc":"2.0","method":"ping","params":{"x":"a\x01b"},"id":7}',
        None,
        -32700,
    ),
    ("not json at all", b"not json at all", None, -32700),
    ("truncated", b'{"jsonrpc":"2.0","id":14,"method":"ping"', None, -32700),
    ("method not a string", b'{"jsonrpc":"2.0","id":9,"method":5}', 9, -32600),
    ("no method", b'{"jsonrpc":"2.0","id":10}', 10, -32600),
    (
        "batch",
        b'[{"jsonrpc":"2.0","id":12,"method":"ping"},{"jsonrpc":"2.0","id":13,"method":"ping"}]',
        None,
        -32600,
    ),
    ("empty batch", b"[]", None, -32600),
    ("not an object", b"5", None, -32600),
    ("id true", b'{"jsonrpc":"2.0","id":true,"method":"ping"}', None, -32600),
    ("id fraction", b'{"jsonrpc":"2.0","id":1.5,"method":"ping"}', None, -32600),
    ("id null", b'{"jsonrpc":"2.0","id":null,"method":"ping"}', None, -32600),
    ("id object", b'{"jsonrpc":"2.0","id":{"a":1},"method":"ping"}', None, -32600),
]


def test_every_bad_line_gets_the_json_rpc_error_and_the_server_goes_on(client: Client) -> None:
    for number, (name, line, request_id, code) in enumerate(BAD_LINES, start=100):
        client.send(line)
        error = client.answer(request_id)["error"]
        assert error["code"] == code, name
        assert error["message"].startswith("TQX_DATA_INVALID: "), name
        client.send(b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % number)
        assert client.answer(number)["result"] == {}, name
    assert_serving(client, 1)


def test_a_contract_path_too_long_for_the_file_system_is_a_path_error(client: Client) -> None:
    call = {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": "compile_contract", "arguments": {"contract": "x" * 100_000}},
    }
    client.send(json.dumps(call).encode())
    result = client.answer(3)["result"]
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "TQX_PATH_INVALID"
    assert len(result["content"][0]["text"]) < 1000  # the path is not echoed back
    assert_serving(client, 4)
