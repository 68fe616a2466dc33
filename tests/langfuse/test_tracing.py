"""What reaches Langfuse: one generation per execute, exported through the real SDK."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langfuse import Langfuse
from langfuse._client.attributes import LangfuseOtelSpanAttributes as A
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse import trace_attributes
from templiqx_langfuse._tracing import (
    META_ADAPTER_ID,
    META_ADAPTER_VERSION,
    META_COMPILER,
    META_CONTRACT_ID,
    META_CONTRACT_VERSION,
    META_ERROR_CODE,
    META_ERROR_DETAIL,
    META_FINISH_REASON,
    META_IGNORED_POLICY_KEYS,
    META_OUTPUT_FINGERPRINT,
    META_OUTPUT_SCHEMA_VALID,
    META_PROVIDER_MODEL,
    META_REQUEST_FINGERPRINT,
    META_RESPONSE_ID,
)
from templiqx_langfuse.testing.server import LoopbackModelServer, Reply, chat_completion, json_reply
from tests.conftest import RuntimeFactory

SUCCESS_METADATA = {
    META_CONTRACT_ID,
    META_CONTRACT_VERSION,
    META_COMPILER,
    META_REQUEST_FINGERPRINT,
    META_OUTPUT_FINGERPRINT,
    META_OUTPUT_SCHEMA_VALID,
    META_ADAPTER_ID,
    META_ADAPTER_VERSION,
    META_FINISH_REASON,
    META_RESPONSE_ID,
    META_PROVIDER_MODEL,
    META_IGNORED_POLICY_KEYS,
}


def metadata(span: ReadableSpan) -> dict[str, Any]:
    prefix = A.OBSERVATION_METADATA + "."
    attributes = span.attributes or {}
    return {
        k[len(prefix) :]: json.loads(str(v)) for k, v in attributes.items() if k.startswith(prefix)
    }


def attr(span: ReadableSpan, key: str) -> Any:
    value = (span.attributes or {}).get(key)
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def only_span(exporter: InMemorySpanExporter, runtime: Any) -> ReadableSpan:
    runtime.tracing.close()  # flush the adapter-owned processor
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_success_generation_carries_every_field(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    usage = {
        "prompt_tokens": 31,
        "completion_tokens": 9,
        "total_tokens": 40,
        "prompt_tokens_details": {"cached_tokens": 12},
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    model_server.set_responder(
        lambda r: json_reply(
            chat_completion(
                {"greeting": "Hello Ryan"},
                usage=usage,
                response_id="chatcmpl-42",
                model="gpt-x-2026",
            )
        )
    )
    runtime = make_runtime()
    receipt = runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    assert span.name == "greeting"
    assert attr(span, A.OBSERVATION_TYPE) == "generation"
    assert attr(span, A.OBSERVATION_MODEL) == "test-model"
    assert attr(span, A.VERSION) == "0.1.0"
    assert attr(span, A.TRACE_NAME) == "greeting"
    assert attr(span, A.OBSERVATION_INPUT) == [
        {"role": "system", "content": "You write concise greetings."},
        {"role": "user", "content": "Hello Ryan for Blinqx"},
    ]
    assert attr(span, A.OBSERVATION_OUTPUT) == {"greeting": "Hello Ryan"}
    assert attr(span, A.OBSERVATION_MODEL_PARAMETERS) == {"temperature": 0}
    assert attr(span, A.OBSERVATION_USAGE_DETAILS) == {
        "input": 31,
        "output": 9,
        "total": 40,
        "input_cached_tokens": 12,
        "output_reasoning_tokens": 3,
    }
    assert attr(span, A.OBSERVATION_LEVEL) is None
    meta = metadata(span)
    assert set(meta) == SUCCESS_METADATA
    assert meta[META_REQUEST_FINGERPRINT] == receipt.request_fingerprint
    assert meta[META_OUTPUT_FINGERPRINT] == receipt.output_fingerprint
    assert (meta[META_RESPONSE_ID], meta[META_PROVIDER_MODEL], meta[META_FINISH_REASON]) == (
        "chatcmpl-42",
        "gpt-x-2026",
        "stop",
    )
    assert span.parent is None
    assert span.end_time is not None
    assert span.start_time is not None


def test_schema_invalid_output_is_a_warning(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    model_server.set_responder(lambda r: json_reply(chat_completion({"greeting": 42})))
    runtime = make_runtime()
    assert runtime.execute(greeting_request).output_schema_valid is False
    span = only_span(exporter, runtime)
    assert attr(span, A.OBSERVATION_LEVEL) == "WARNING"
    assert metadata(span)[META_OUTPUT_SCHEMA_VALID] is False
    assert attr(span, A.OBSERVATION_OUTPUT) == {"greeting": 42}


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (Reply(429, {"retry-after": "1"}, b"{}"), "TQX_RUNTIME_RATE_LIMITED"),
        (Reply(503, {}, b""), "TQX_RUNTIME_UNAVAILABLE"),
        (Reply(400, {}, b""), "TQX_RUNTIME_PERMANENT"),
        (Reply(408, {}, b""), "TQX_RUNTIME_TIMEOUT"),
        (Reply(200, {}, b"not json"), "TQX_RUNTIME_INVALID_RESPONSE"),
    ],
)
def test_failures_are_errors_with_the_code(
    reply: Reply,
    code: str,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    model_server.set_responder(lambda r: reply)
    runtime = make_runtime()
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    assert attr(span, A.OBSERVATION_LEVEL) == "ERROR"
    assert attr(span, A.OBSERVATION_STATUS_MESSAGE) == code
    assert attr(span, A.OBSERVATION_OUTPUT) is None
    meta = metadata(span)
    assert meta[META_ERROR_CODE] == code
    assert meta[META_ERROR_DETAIL] == raised.value.failure.detail
    # The SDK was never handed the exception: no exception event, no stack trace.
    assert all(event.name != "exception" for event in span.events)


def test_each_execution_is_its_own_trace(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    runtime = make_runtime()
    for _ in range(3):
        runtime.execute(greeting_request)
    runtime.tracing.close()
    trace_ids = {span.context.trace_id for span in exporter.get_finished_spans()}
    assert len(trace_ids) == 3


def test_nested_under_a_host_langfuse_observation(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    host_exporter = InMemorySpanExporter()
    host_provider = TracerProvider()
    host = Langfuse(
        public_key="pk-lf-host-nested",
        secret_key="sk-lf-host",
        base_url="http://127.0.0.1:9",
        tracer_provider=host_provider,
        span_exporter=host_exporter,
    )
    runtime = make_runtime(langfuse_client=host)
    with (
        host.start_as_current_observation(name="host-request", as_type="span"),
        trace_attributes(session_id="should-not-apply"),
    ):
        runtime.execute(greeting_request)
    runtime.close()
    host_provider.force_flush()
    spans = {span.name: span for span in host_exporter.get_finished_spans()}
    generation, parent = spans["greeting"], spans["host-request"]
    assert generation.parent is not None
    assert generation.parent.span_id == parent.context.span_id
    assert generation.context.trace_id == parent.context.trace_id
    assert attr(generation, A.TRACE_NAME) is None  # not the root: trace attributes untouched
    assert attr(generation, A.TRACE_SESSION_ID) is None
    # A host-supplied client is never flushed or shut down by the adapter: it still exports.
    with host.start_as_current_observation(name="after-close", as_type="span"):
        pass
    host_provider.force_flush()
    assert "after-close" in [span.name for span in host_exporter.get_finished_spans()]
    host_provider.shutdown()


def test_joins_a_plain_opentelemetry_host_trace(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    host_tracer = TracerProvider().get_tracer("host-app")
    runtime = make_runtime()
    with host_tracer.start_as_current_span("http-handler") as host_span:
        runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    assert span.context.trace_id == host_span.get_span_context().trace_id
    assert span.parent is not None
    assert span.parent.span_id == host_span.get_span_context().span_id


def test_trace_attributes_apply_when_root(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    runtime = make_runtime()
    with trace_attributes(tags=["nightly", "crm"], session_id="sess-1", user_id="user-7"):
        runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    assert attr(span, A.TRACE_SESSION_ID) == "sess-1"
    assert attr(span, A.TRACE_USER_ID) == "user-7"
    assert list(attr(span, A.TRACE_TAGS)) == ["nightly", "crm"]


def test_owned_client_never_becomes_the_global_provider(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    before = otel_trace.get_tracer_provider()
    runtime = make_runtime()
    runtime.execute(greeting_request)
    assert otel_trace.get_tracer_provider() is before
    assert runtime.tracing._owned_provider is not before


def test_receipt_is_identical_with_tracing_on_and_off(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    traced = make_runtime().execute(greeting_request)
    untraced = make_runtime(tracing=False).execute(greeting_request)
    assert traced == untraced
