"""Parallel tool calls whose fragments interleave, over real SSE from a loopback server."""

from __future__ import annotations

from typing import Any

import pytest

from templiqx_core import ExecutionRequest, ToolCallDeltaEvent
from templiqx_core.conformance import (
    ConformanceError,
    assemble_tool_calls,
    check_tool_call_assembly,
    run_stream,
)
from templiqx_streaming_host import _runtime
from templiqx_streaming_host._chunks import ChunkFolder, Emitted
from tests.loopback import LoopbackModelServer
from tests.streaming.conftest import (
    INTERLEAVED,
    INTERLEAVED_CALLS,
    HostFactory,
    chunk,
    split_at_random,
    sse,
    streamed,
    tool_fragments,
)


def serve(server: LoopbackModelServer, body: bytes, pieces: Any = None) -> None:
    server.set_responder(lambda request: streamed(body, pieces=pieces))


@pytest.mark.parametrize("seed", [None, *range(8)])
def test_interleaved_calls_assemble_by_index_however_the_bytes_are_split(
    seed: int | None,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    pieces = None if seed is None else split_at_random(INTERLEAVED, seed, pieces=40)
    serve(stream_server, INTERLEAVED, pieces)
    run = run_stream(make_host(), plain_request)
    assert run.error is None
    assert run.receipt is not None
    calls = [(c.name, c.arguments) for c in assemble_tool_calls(run.events)]
    assert calls == INTERLEAVED_CALLS
    # the first call streamed live, before the stream ended
    first = [e for e in run.events if isinstance(e, ToolCallDeltaEvent)][:3]
    assert [e.name for e in first] == ["get_weather", "", ""]
    check_tool_call_assembly(make_host(), plain_request, expected=INTERLEAVED_CALLS)


def test_a_different_id_for_one_index_fails_the_stream(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    body = sse(
        chunk('{"greeting": "hi"}'),
        tool_fragments({"index": 0, "id": "call_a", "function": {"name": "f", "arguments": "{"}}),
        tool_fragments({"index": 0, "id": "call_z", "function": {"arguments": "}"}}),
        tool_fragments(finish="tool_calls"),
    )
    serve(stream_server, body, split_at_random(body, 3))
    run = run_stream(make_host(), plain_request)
    assert run.error is not None
    assert run.error.code == "TQX_RUNTIME_INVALID_RESPONSE"
    assert "second, different id" in run.error.message


def test_indices_with_gaps_keep_index_order(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    body = sse(
        chunk('{"greeting": "hi"}'),
        tool_fragments(
            {"index": 4, "id": "d", "function": {"name": "f", "arguments": "{"}},
            {"index": 9, "id": "e", "function": {"name": "g", "arguments": "[]"}},
            {"index": 6, "id": "c", "function": {"name": "h", "arguments": "{}"}},
        ),
        tool_fragments({"index": 4, "function": {"arguments": "}"}}),
        tool_fragments(finish="tool_calls"),
    )
    serve(stream_server, body)
    run = run_stream(make_host(), plain_request)
    assert run.error is None
    calls = [(c.name, c.arguments) for c in assemble_tool_calls(run.events)]
    assert calls == [("f", "{}"), ("h", "{}"), ("g", "[]")]


class ForwardingFolder(ChunkFolder):
    """Deliberately broken: forwards each fragment as it arrives (name on an index's first)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[Any] = set()

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[Emitted]:
        function = fragment.get("function") or {}
        first = fragment.get("index") not in self.seen
        self.seen.add(fragment.get("index"))
        name = function.get("name") or "" if first else ""
        return [ToolCallDeltaEvent(name=name, arguments_fragment=function.get("arguments") or "")]

    def finish(self) -> list[Emitted]:
        return []


def test_the_kit_catches_a_host_that_forwards_interleaved_fragments(
    monkeypatch: pytest.MonkeyPatch,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    monkeypatch.setattr(_runtime, "ChunkFolder", ForwardingFolder)
    sequential = sse(
        chunk('{"greeting": "hi"}'),
        tool_fragments({"index": 0, "id": "a", "function": {"name": "f", "arguments": "{"}}),
        tool_fragments({"index": 0, "function": {"arguments": "}"}}),
        tool_fragments({"index": 1, "id": "b", "function": {"name": "g", "arguments": "[]"}}),
        tool_fragments(finish="tool_calls"),
    )
    serve(stream_server, sequential)
    check_tool_call_assembly(make_host(), plain_request, expected=[("f", "{}"), ("g", "[]")])
    serve(stream_server, INTERLEAVED)
    with pytest.raises(ConformanceError, match="tool call 0 assembles to get_weather"):
        check_tool_call_assembly(make_host(), plain_request, expected=INTERLEAVED_CALLS)
