"""The port's guarantees on the Langfuse adapter: guarded receipts, finished traces, lifecycle."""

from __future__ import annotations

import threading
import time

import pytest
from langfuse._client.attributes import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import (
    ExecutionRequest,
    RuntimeClosed,
    RuntimeFailureError,
    StreamEvent,
    codes,
)
from templiqx_core.adapters import MAX_DEPTH
from templiqx_langfuse import RetryingRuntime
from templiqx_langfuse._redaction import live_redactors
from tests.conftest import GREETING, RuntimeFactory, assert_closed, start_call
from tests.langfuse.test_tracing import attr, metadata, only_span
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)

DEEP_REPLY = "[" * 1000 + "]" * 1000  # 2 KB that parses, but has no canonical form


def test_a_1000_deep_reply_is_invalid_response_with_the_generation_at_error(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    model_server.set_responder(lambda r: json_reply(chat_completion(DEEP_REPLY)))
    runtime = make_runtime()
    events: list[StreamEvent] = []
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute_streaming(greeting_request, events.append)
    assert raised.value.code == codes.RUNTIME_INVALID_RESPONSE
    assert f"nested deeper than {MAX_DEPTH} levels" in raised.value.failure.detail
    assert "[" not in raised.value.failure.detail
    assert [(e.kind, getattr(e, "code", None)) for e in events] == [
        ("Failed", codes.RUNTIME_INVALID_RESPONSE)
    ]
    span = only_span(exporter, runtime)
    assert attr(span, A.OBSERVATION_LEVEL) == "ERROR"
    assert attr(span, A.OBSERVATION_STATUS_MESSAGE).startswith(
        codes.RUNTIME_INVALID_RESPONSE + ": "
    )
    assert metadata(span)["error_code"] == codes.RUNTIME_INVALID_RESPONSE


def test_an_unexpected_error_in_the_round_trip_is_mapped_and_still_traced(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    class Broken(Exception):
        pass

    runtime = make_runtime()

    def broken(*args: object, **kwargs: object) -> object:
        raise Broken("sk-model-SECRET in the text")

    runtime._wiring.clients.sync.stream = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    assert raised.value.code == codes.RUNTIME_PERMANENT
    assert "SECRET" not in str(raised.value)
    span = only_span(exporter, runtime)
    assert attr(span, A.OBSERVATION_LEVEL) == "ERROR"
    assert "SECRET" not in str(span.attributes)


def test_a_closed_runtime_raises_runtime_closed(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    runtime = make_runtime()
    assert runtime.execute(greeting_request).output == GREETING
    runtime.close()
    runtime.close()  # idempotent
    assert_closed(runtime, greeting_request)


def test_close_during_a_call_gives_runtime_closed_never_a_raw_error(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    arrived, answer = threading.Event(), threading.Event()

    def slow(request: ServerRequest) -> Reply:
        arrived.set()
        answer.wait(5)
        return json_reply(chat_completion(GREETING))

    model_server.set_responder(slow)
    runtime = make_runtime(tracing=False)
    worker, outcome = start_call(lambda: runtime.execute(greeting_request))
    assert arrived.wait(5)
    closer = threading.Thread(target=runtime.close)
    started = time.monotonic()
    closer.start()  # close() runs on a third thread while the call is in flight
    closer.join(5)
    worker.join(5)
    aborted_after = time.monotonic() - started
    answer.set()
    # The server would answer only after 5 s: close() aborts the call's I/O at once, and
    # the call fails as the README promises, RuntimeClosed (TQX_RUNTIME_CLOSED).
    assert not worker.is_alive()
    assert aborted_after < 2.0, aborted_after
    assert [type(error) for error in outcome] == [RuntimeClosed], outcome
    assert outcome[0].code == codes.RUNTIME_CLOSED
    assert_closed(runtime, greeting_request)


def test_closing_a_retrying_runtime_closes_the_inner_one(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    inner = make_runtime()
    with RetryingRuntime(inner, attempts=2) as retrying:
        assert retrying.descriptor() == inner.descriptor()
        retrying.execute(greeting_request)
        assert inner._wiring.redactor in live_redactors()
    assert inner.closed
    assert inner._wiring.clients.sync.is_closed
    assert len(exporter.get_finished_spans()) == 1  # flushed by the inner close
    assert inner._wiring.redactor not in live_redactors()
    assert_closed(retrying, greeting_request)
