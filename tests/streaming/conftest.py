"""The reference streaming host against a loopback server that streams real bytes."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest

from templiqx_core import CompiledInteraction, ExecutionRequest
from templiqx_langfuse import ModelConfig
from templiqx_streaming_host import StreamingHostRuntime
from tests.conftest import async_driven
from tests.loopback import LoopbackModelServer, Reply

MODEL_KEY = "sk-stream-SECRET-0123456789"
SSE = {"content-type": "text/event-stream"}


def sse(*payloads: Any, done: bool = True) -> bytes:
    """An SSE body, one ``data:`` event per payload (dicts as JSON), ``[DONE]`` last."""
    events = [p if isinstance(p, str) else json.dumps(p) for p in payloads]
    if done:
        events.append("[DONE]")
    return "".join(f"data: {event}\n\n" for event in events).encode()


def chunk(content: str | None = None, *, finish: str | None = None, **delta: Any) -> dict[str, Any]:
    """One ``chat.completion.chunk`` for choice 0."""
    if content is not None:
        delta["content"] = content
    return {
        "id": "chatcmpl-loopback",
        "object": "chat.completion.chunk",
        "model": "loopback-model",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def text_stream(parts: Sequence[str], *, finish: str = "stop", done: bool = True) -> bytes:
    return sse(*[chunk(p) for p in parts], chunk(finish=finish), done=done)


def split_at_random(body: bytes, seed: int, *, pieces: int = 12) -> tuple[bytes, ...]:
    """``body`` cut at random byte boundaries (fixed seed), possibly inside UTF-8."""
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(body)), min(pieces - 1, len(body) - 1)))
    bounds = [0, *cuts, len(body)]
    return tuple(body[a:b] for a, b in itertools.pairwise(bounds))


def streamed(
    body: bytes,
    *,
    pause_s: float = 0.0,
    headers: dict[str, str] | None = None,
    pieces: Sequence[bytes] | None = None,
    status: int = 200,
) -> Reply:
    """A reply written as separate HTTP chunks (one per piece), optionally paced."""
    parts: list[bytes | float] = []
    for piece in pieces if pieces is not None else (body,):
        parts.append(piece)
        if pause_s:
            parts.append(pause_s)
    return Reply(status, dict(SSE if headers is None else headers), pieces=tuple(parts))


@pytest.fixture(scope="module")
def stream_server() -> Iterator[LoopbackModelServer]:
    server = LoopbackModelServer(lambda request: Reply(500)).start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def plain_interaction(greeting: CompiledInteraction) -> CompiledInteraction:
    """Any JSON output is schema-valid: the corpus streams were not made for a contract."""
    return greeting.model_copy(update={"output_schema": {}})


@pytest.fixture
def plain_request(plain_interaction: CompiledInteraction) -> ExecutionRequest:
    return ExecutionRequest(interaction=plain_interaction)


HostFactory = Callable[..., StreamingHostRuntime]


@pytest.fixture
def make_host(
    stream_server: LoopbackModelServer, io: str, request: pytest.FixtureRequest
) -> Iterator[HostFactory]:
    """Hosts against the stream server; under ``BOTH_IO`` driven through the async path."""
    made: list[StreamingHostRuntime] = []
    runner = request.getfixturevalue("event_loop_runner") if io == "async" else None

    def build(
        *,
        timeout_s: float = 5.0,
        cls: type[StreamingHostRuntime] = StreamingHostRuntime,
        base_url: str | None = None,
        **kwargs: Any,
    ) -> StreamingHostRuntime:
        kind = cls if runner is None else async_driven(cls, runner)
        runtime = kind(
            ModelConfig(
                base_url=base_url or stream_server.base_url,
                api_key=MODEL_KEY,
                model="stream-model",
                timeout_s=timeout_s,
            ),
            **kwargs,
        )
        made.append(runtime)
        return runtime

    yield build
    for runtime in made:
        runtime.close()


def tool_fragments(*calls: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    """One chunk carrying tool-call fragments (of one index or several) for choice 0."""
    return chunk(finish=finish, tool_calls=list(calls))


# Parallel calls as vLLM/LiteLLM-style gateways may stream them: index 0, 1, 0 again,
# several indices in one chunk, a name split over two chunks, an id repeated; content
# first so that the stream completes (a receipt, not "tool_calls instead of content").
INTERLEAVED = sse(
    chunk('{"greeting": "hi"}'),
    tool_fragments(
        {"index": 0, "id": "call_a", "type": "function", "function": {"name": "get_weather"}}
    ),
    tool_fragments({"index": 0, "function": {"arguments": '{"ci'}}),
    tool_fragments(
        {
            "index": 1,
            "id": "call_b",
            "type": "function",
            "function": {"name": "get_", "arguments": ""},
        },
        {"index": 0, "function": {"arguments": 'ty": "Par'}},
    ),
    tool_fragments({"index": 1, "function": {"name": "time", "arguments": '{"tz": '}}),
    tool_fragments(
        {
            "index": 2,
            "id": "call_c",
            "type": "function",
            "function": {"name": "ping", "arguments": "{}"},
        },
        {"index": 0, "id": "call_a", "function": {"arguments": 'is"}'}},
    ),
    tool_fragments({"index": 1, "function": {"arguments": '"CET"}'}}),
    tool_fragments(finish="tool_calls"),
)
INTERLEAVED_CALLS = [
    ("get_weather", '{"city": "Paris"}'),
    ("get_time", '{"tz": "CET"}'),
    ("ping", "{}"),
]
