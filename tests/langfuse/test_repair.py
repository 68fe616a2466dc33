"""Repair against the loopback model server, traced: one more round trip per try, what the
repair request carries, and the trace the tries share (generations, levels, ``repair_of``).
Every test runs as a sync host and as an async host calls it."""

from __future__ import annotations

import asyncio
import contextvars
import itertools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import pytest
from langfuse import Langfuse
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import (
    ExecutionReceipt,
    ExecutionRequest,
    RepairingRuntime,
    RuntimeAdapter,
    RuntimeFailureError,
    codes,
    collect_attempts,
)
from templiqx_core.adapters import request_fingerprint
from templiqx_langfuse import RetryingRuntime, collect_traces
from templiqx_langfuse._tracing import experiment_attributes
from tests.conftest import BOTH_IO, GREETING, MODEL_KEY, RuntimeFactory
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)

pytestmark = BOTH_IO

Call = Callable[[RuntimeAdapter, ExecutionRequest], ExecutionReceipt]
_HOST_KEYS = itertools.count()


@pytest.fixture
def call(io: str) -> Iterator[Call]:
    """``execute`` (sync host) or ``aexecute`` on one event loop (async host)."""
    with asyncio.Runner() as runner:

        def run(runtime: RuntimeAdapter, request: ExecutionRequest) -> ExecutionReceipt:
            if io == "async":
                coro = runtime.aexecute(request)
                return runner.run(coro, context=contextvars.copy_context())
            return runtime.execute(request)

        yield run


def answers(server: LoopbackModelServer, *replies: Reply) -> None:
    """The server answers ``replies`` in turn (the last repeats)."""
    turn = itertools.count()
    server.set_responder(lambda request: replies[min(next(turn), len(replies) - 1)])


def said(content: Any, **kw: Any) -> Reply:
    return json_reply(chat_completion(content, **kw))


def spans_of(runtime: Any, exporter: InMemorySpanExporter) -> Sequence[ReadableSpan]:
    runtime.tracing.close()  # flush the adapter-owned processor
    return exporter.get_finished_spans()


def meta(span: ReadableSpan) -> dict[str, Any]:
    return dict(json.loads((span.attributes or {})[A.OBSERVATION_METADATA]))  # type: ignore[arg-type]


def level(span: ReadableSpan) -> Any:
    return (span.attributes or {}).get(A.OBSERVATION_LEVEL)


def sent_messages(request: ServerRequest) -> list[dict[str, str]]:
    return list(request.json()["messages"])


def test_not_json_then_valid_is_one_more_round_trip_in_one_trace(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    answers(model_server, said("Hello Ryan!"), said(GREETING))
    inner = make_runtime()
    with collect_traces() as found, collect_attempts() as tries:
        receipt = call(RepairingRuntime(inner, attempts=3), greeting_request)
    assert receipt.output == GREETING
    assert receipt.output_schema_valid
    assert tries == [2]
    original = request_fingerprint(greeting_request.interaction)
    assert receipt.request_fingerprint == original
    first, second = model_server.requests
    assert sent_messages(second)[:-2] == sent_messages(first)
    assistant, user = sent_messages(second)[-2:]
    assert assistant == {"role": "assistant", "content": "Hello Ryan!"}
    assert user["role"] == "user"
    assert "- message content is not JSON" in user["content"]
    # The rest of the body is the original's: same model, schema and parameters.
    rest = {k: v for k, v in second.json().items() if k != "messages"}
    assert rest == {k: v for k, v in first.json().items() if k != "messages"}

    tried, repaired = spans_of(inner, exporter)
    assert tried.context.trace_id == repaired.context.trace_id
    assert [ref.trace_id for ref in found] == [found[0].trace_id] * 2
    assert repaired.parent is not None
    assert repaired.parent.span_id == tried.context.span_id
    assert level(tried) == "WARNING"
    assert level(repaired) is None
    status = (tried.attributes or {})[A.OBSERVATION_STATUS_MESSAGE]
    assert status == f"{codes.RUNTIME_INVALID_RESPONSE}: message content is not JSON"
    assert "repair_of" not in meta(tried)
    assert "repair_attempt" not in meta(tried)
    assert meta(repaired)["repair_of"] == f"{tried.context.span_id:016x}"
    assert meta(repaired)["repair_attempt"] == 2
    # Each generation carries the fingerprint of what it sent.
    assert meta(tried)["request_fingerprint"] == original
    assert meta(repaired)["request_fingerprint"] not in (original, None)
    # The trace is named once, by its root: the first try.
    assert (tried.attributes or {}).get(A.TRACE_NAME) == "greeting"
    assert A.TRACE_NAME not in (repaired.attributes or {})


def test_schema_invalid_then_valid_lists_the_rule_and_chains_the_tries(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    answers(model_server, said({"greeting": 1}), said({}), said(GREETING))
    inner = make_runtime()
    receipt = call(RepairingRuntime(inner, attempts=3), greeting_request)
    assert receipt.output == GREETING
    assert len(model_server.requests) == 3
    second, third = (sent_messages(r) for r in model_server.requests[1:])
    assert second[-2]["content"] == '{"greeting":1}'
    assert "- /greeting: not of type string" in second[-1]["content"]
    assert third[:-2] == second
    assert "- /greeting: missing (required)" in third[-1]["content"]

    spans = spans_of(inner, exporter)
    assert [level(s) for s in spans] == ["WARNING", "WARNING", None]
    assert len({s.context.trace_id for s in spans}) == 1
    assert [meta(s).get("repair_of") for s in spans] == [
        None,
        f"{spans[0].context.span_id:016x}",
        f"{spans[1].context.span_id:016x}",
    ]


def test_a_truncated_answer_is_not_repaired(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    answers(model_server, said('{"greeting": "Hel', finish_reason="length"), said(GREETING))
    inner = make_runtime()
    with pytest.raises(RuntimeFailureError) as raised:
        call(RepairingRuntime(inner, attempts=3), greeting_request)
    assert raised.value.code == codes.RUNTIME_INVALID_RESPONSE
    assert "finish_reason length" in raised.value.failure.detail
    assert len(model_server.requests) == 1
    (span,) = spans_of(inner, exporter)
    assert level(span) == "ERROR"


def test_the_deadline_stops_the_repair_during_a_try(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    def slow_prose(request: ServerRequest) -> Reply:
        model_server.sleep(0.5)  # the first try outlives the repair's deadline
        return said("not JSON at all")

    model_server.set_responder(slow_prose)
    inner = make_runtime()
    with pytest.raises(RuntimeFailureError) as raised, collect_attempts() as tries:
        call(RepairingRuntime(inner, attempts=4, deadline_s=0.3), greeting_request)
    assert raised.value.code == codes.RUNTIME_INVALID_RESPONSE
    assert len(model_server.requests) == 1
    assert tries == [1]
    (span,) = spans_of(inner, exporter)
    assert level(span) == "ERROR"  # not repaired: the call's own failure


def test_the_answer_sent_back_is_redacted(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    answers(model_server, said(f"my key is {MODEL_KEY}"))
    with pytest.raises(RuntimeFailureError) as raised:
        call(RepairingRuntime(make_runtime(), attempts=2), greeting_request)
    assert MODEL_KEY not in (raised.value.failure.answer or "MISSING")
    assert "my key is" in (raised.value.failure.answer or "")
    assert MODEL_KEY not in model_server.requests[1].body.decode()
    assert MODEL_KEY not in repr(raised.value.failure)


def test_retries_inside_each_try_share_the_trace(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    unavailable = json_reply({"error": {"message": "busy"}}, status=503)
    answers(model_server, unavailable, said("prose"), unavailable, said(GREETING))
    inner = make_runtime()
    retrying = RetryingRuntime(inner, attempts=2, base_wait_s=0, sleep=lambda s: None)
    receipt = call(RepairingRuntime(retrying, attempts=2), greeting_request)
    assert receipt.output == GREETING
    assert len(model_server.requests) == 4
    spans = spans_of(inner, exporter)
    assert [level(s) for s in spans] == ["ERROR", "WARNING", "ERROR", None]
    assert len({s.context.trace_id for s in spans}) == 1
    # The repair names the last generation of the try it repairs.
    assert meta(spans[3])["repair_of"] == f"{spans[1].context.span_id:016x}"


def test_under_a_host_langfuse_span_the_tries_share_the_host_trace(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    host_exporter, host_provider = InMemorySpanExporter(), TracerProvider()
    host = Langfuse(
        public_key=f"pk-lf-host-repair-{next(_HOST_KEYS)}",  # the SDK keeps one per key
        secret_key="sk-lf-host",
        base_url="http://127.0.0.1:9",
        tracer_provider=host_provider,
        span_exporter=host_exporter,
    )
    answers(model_server, said("prose"), said(GREETING))
    inner = make_runtime()
    with host.start_as_current_observation(name="host-request", as_type="span"):
        call(RepairingRuntime(inner, attempts=2), greeting_request)
    host_provider.force_flush()
    (parent,) = [s for s in host_exporter.get_finished_spans() if s.name == "host-request"]
    tries = spans_of(inner, exporter)
    assert len(tries) == 2
    assert {s.context.trace_id for s in tries} == {parent.context.trace_id}
    assert tries[0].parent is not None
    assert tries[0].parent.span_id == parent.context.span_id
    assert tries[1].parent is not None
    assert tries[1].parent.span_id == tries[0].context.span_id
    assert [level(s) for s in tries] == ["WARNING", None]
    assert meta(tries[1])["repair_of"] == f"{tries[0].context.span_id:016x}"
    for span in tries:  # the host owns the trace: no try renames it or makes itself root
        assert A.TRACE_NAME not in (span.attributes or {})
        assert A.AS_ROOT not in (span.attributes or {})
    host_provider.shutdown()


def test_in_an_experiment_every_try_names_the_first_the_items_root(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    call: Call,
) -> None:
    experiment = {A.EXPERIMENT_ID: "exp-r", A.EXPERIMENT_ITEM_ID: "item-1"}
    answers(model_server, said("prose"), said(GREETING))
    inner = make_runtime()
    with experiment_attributes(experiment):
        call(RepairingRuntime(inner, attempts=2), greeting_request)
    first, repaired = spans_of(inner, exporter)
    root = f"{first.context.span_id:016x}"
    for span in (first, repaired):
        assert (span.attributes or {})[A.EXPERIMENT_ID] == "exp-r"
        assert (span.attributes or {})[A.EXPERIMENT_ITEM_ROOT_OBSERVATION_ID] == root
