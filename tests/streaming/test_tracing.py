"""Traced to Langfuse like the Langfuse adapter, plus the time of the first token.

The generation records ``completion_start_time`` (Langfuse's time-to-first-token) when
the first delta arrived; the stream's usage chunk fills ``usage_details``; no key leaks.
"""

from __future__ import annotations

import json
from datetime import datetime

import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest, RuntimeFailureError, StreamEvent
from templiqx_langfuse import LangfuseConfig
from tests.conftest import BOTH_IO, PUBLIC_KEY, SECRET_KEY
from tests.loopback import LoopbackModelServer
from tests.streaming.conftest import MODEL_KEY, HostFactory, chunk, sse, streamed

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO

PARTS = ['{"greeting": ', '"Hello Ry', 'an"}']
USAGE = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}


def stamp(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


@pytest.mark.parametrize("outcome", ["complete", "failed"])
def test_generation_records_the_first_token(
    outcome: str,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    greeting_request: ExecutionRequest,
) -> None:
    first = sse(chunk(PARTS[0]), done=False)
    rest = (
        sse(*[chunk(p) for p in PARTS[1:]], chunk(finish="stop"), {"choices": [], "usage": USAGE})
        if outcome == "complete"
        else sse({"error": {"message": "boom", "code": 503}}, done=False)
    )
    stream_server.set_responder(lambda request: streamed(first, pieces=[first, 0.4, rest]))
    exporter = InMemorySpanExporter()
    host = make_host(
        langfuse=LangfuseConfig(
            public_key=f"{PUBLIC_KEY}-stream-{outcome}",
            secret_key=SECRET_KEY,
            base_url="http://127.0.0.1:9",
            flush_timeout_s=2.0,
        ),
        span_exporter=exporter,
    )
    events: list[StreamEvent] = []
    if outcome == "complete":
        host.execute_streaming(greeting_request, events.append)
    else:
        with pytest.raises(RuntimeFailureError):
            host.execute_streaming(greeting_request, events.append)
    host.close()  # flushes the adapter-owned processor

    (span,) = exporter.get_finished_spans()
    attributes = dict(span.attributes or {})
    assert span.name == "greeting"
    first_token = stamp(str(attributes[A.OBSERVATION_COMPLETION_START_TIME]))
    assert span.start_time is not None
    assert span.end_time is not None
    start, end = span.start_time / 1e9, span.end_time / 1e9
    assert start <= first_token < end
    assert end - first_token > 0.3  # the first token came a pause before the end
    assert first_token - start < 0.3
    if outcome == "complete":
        usage = json.loads(str(attributes[A.OBSERVATION_USAGE_DETAILS]))
        assert usage["total"] == 27
    else:
        assert attributes[A.OBSERVATION_LEVEL] == "ERROR"
    blob = json.dumps(attributes, default=str)
    assert MODEL_KEY not in blob
    assert SECRET_KEY not in blob
