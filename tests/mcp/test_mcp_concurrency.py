"""The MCP server under load, as a real subprocess on stdio: dozens of concurrent
streaming calls all answered, a bound on calls in flight with a typed refusal beyond it,
and an exit as soon as stdin closes, whatever is still running."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from templiqx_core import codes
from templiqx_core._mcp import MAX_TOOL_CALLS
from tests.conftest import REPO_ROOT
from tests.loopback import LoopbackModelServer, Reply, ServerRequest
from tests.mcp.test_mcp_server import CONTEXT, CONTRACT, INPUTS, TEMPLIQX, clean_env, stdio_session

CONCURRENT = 40


def sse_reply(request: ServerRequest) -> Reply:
    """A streamed completion of ``{"greeting": "Hello Ryan"}`` in 12 deltas, 20 ms apart."""
    text = json.dumps({"greeting": "Hello Ryan"})
    parts = [text[i : i + 2] for i in range(0, len(text), 2)]
    events = [
        {"id": "c", "object": "chat.completion.chunk", "model": "m",
         "choices": [{"index": 0, "delta": {"content": part}, "finish_reason": None}]}
        for part in parts
    ] + [{"id": "c", "object": "chat.completion.chunk", "model": "m",
          "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}]  # fmt: skip
    pieces: list[bytes | float] = []
    for event in events:
        pieces += [f"data: {json.dumps(event)}\n\n".encode(), 0.02]
    pieces.append(b"data: [DONE]\n\n")
    return Reply(200, {"content-type": "text/event-stream"}, pieces=tuple(pieces))


@pytest.fixture
def streaming_model() -> Iterator[LoopbackModelServer]:
    server = LoopbackModelServer(sse_reply).start()
    try:
        yield server
    finally:
        server.stop()


def test_forty_concurrent_streaming_calls_are_all_answered(
    streaming_model: LoopbackModelServer,
) -> None:
    progress: list[str | None] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append(message)

    async def scenario() -> list[Any]:
        results: list[Any] = []
        env = endpoint_env(streaming_model.base_url)
        async with stdio_session("--runtime", "openai-stream", env=env) as client:
            args = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT, "stream": True}

            async def one() -> None:
                results.append(
                    await client.call_tool("execute_contract", args, progress_callback=on_progress)
                )

            with anyio.fail_after(60):  # before: a handful answered, then nothing, forever
                async with anyio.create_task_group() as group:
                    for _ in range(CONCURRENT):
                        group.start_soon(one)
                # and the server still answers afterwards
                results.append(await client.call_tool("compile_contract", args))
        return results

    results = anyio.run(scenario)
    assert len(results) == CONCURRENT + 1
    assert all(not r.is_error and r.structured_content["ok"] for r in results)
    assert len([m for m in progress if m]) >= CONCURRENT * 6  # every call streamed its deltas


class HeldModel:
    """A loopback model whose replies wait until released (bounded: 30 s at most)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.server = LoopbackModelServer(self._respond)

    def _respond(self, request: ServerRequest) -> Reply:
        self.release.wait(30)
        return Reply(status=503, body=b"held")


@pytest.fixture
def held_model() -> Iterator[HeldModel]:
    model = HeldModel()
    model.server.start()
    try:
        yield model
    finally:
        model.release.set()
        model.server.stop()


def endpoint_env(base_url: str) -> dict[str, str]:
    return {
        **clean_env(),
        "TEMPLIQX_MODEL_BASE_URL": base_url,
        "TEMPLIQX_MODEL_API_KEY": "sk-model-0123456789",
        "TEMPLIQX_MODEL": "m",
    }


def model_env(model: HeldModel) -> dict[str, str]:
    return endpoint_env(model.server.base_url)


def jsonrpc(message_id: int, method: str, params: dict[str, Any]) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": message_id, "method": method, "params": params})


INITIALIZE = jsonrpc(
    0,
    "initialize",
    {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
)
INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


def call(message_id: int) -> str:
    arguments = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT, "stream": True}
    return jsonrpc(message_id, "tools/call", {"name": "execute_contract", "arguments": arguments})


def test_the_server_exits_when_stdin_closes_with_calls_in_flight(held_model: HeldModel) -> None:
    with subprocess.Popen(
        [TEMPLIQX, "mcp", "--runtime", "langfuse"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        cwd=REPO_ROOT, env=model_env(held_model), text=True,
    ) as server:  # fmt: skip
        assert server.stdin is not None
        assert server.stdout is not None
        try:
            server.stdin.write(INITIALIZE + "\n")
            server.stdin.flush()
            assert json.loads(server.stdout.readline())["id"] == 0
            server.stdin.write(INITIALIZED + "\n")
            server.stdin.write("".join(call(n) + "\n" for n in range(1, 11)))
            server.stdin.flush()
            for _ in range(100):  # until the calls reached the held model
                if len(held_model.server.requests) >= 10:
                    break
                time.sleep(0.05)
            assert len(held_model.server.requests) >= 10
            closed = time.monotonic()
            server.stdin.close()
            code = server.wait(timeout=15)
            took = time.monotonic() - closed
        finally:
            server.kill()
    assert code == 0
    assert took < 5.0, f"exited {took:.1f} s after stdin closed"


MAX_CALLS = MAX_TOOL_CALLS


def test_calls_beyond_the_bound_are_refused_at_once_with_a_typed_error(
    held_model: HeldModel,
) -> None:
    extra = 6

    async def scenario() -> list[Any]:
        results: list[Any] = []
        async with stdio_session("--runtime", "langfuse", env=model_env(held_model)) as client:
            args = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT}

            async def one() -> None:
                results.append(await client.call_tool("execute_contract", args))

            with anyio.fail_after(60):
                async with anyio.create_task_group() as group:
                    for _ in range(MAX_CALLS):
                        group.start_soon(one)
                    for _ in range(200):  # all held calls are in flight
                        if len(held_model.server.requests) >= min(MAX_CALLS, 16):
                            break
                        await anyio.sleep(0.05)
                    await anyio.sleep(0.5)
                    for _ in range(extra):
                        group.start_soon(one)
                    for _ in range(200):
                        if len(results) >= extra:
                            break
                        await anyio.sleep(0.05)
                    refused_early = list(results)
                    held_model.release.set()
        return [refused_early, results]

    refused_early, results = anyio.run(scenario)
    texts = [r.content[0].text for r in refused_early]
    assert len(refused_early) == extra, texts
    assert all(t.startswith(codes.RUNTIME_RATE_LIMITED) for t in texts), texts
    assert len(results) == MAX_CALLS + extra
