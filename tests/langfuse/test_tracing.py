"""What reaches Langfuse, and what the Langfuse server makes of it.

Every test asserts exported attributes (the in-memory exporter and/or the loopback OTLP
receiver) and names the rule of the server's OTel mapping (``OtelIngestionProcessor``,
``ingestion/types.ts``) that gives them their meaning.
"""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml
from langfuse import Langfuse
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import (
    CompiledInteraction,
    Contract,
    ExecutionRequest,
    RenderRequest,
    RuntimeFailureError,
    compile_contract,
)
from templiqx_core.adapters import RuntimeOptions
from templiqx_langfuse import (
    PROMPT_CAPABILITY,
    LangfuseTracedRuntime,
    collect_traces,
    trace_attributes,
)
from templiqx_langfuse._factory import runtime_factory
from tests.conftest import BOTH_IO, MODEL_KEY, RuntimeFactory
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    chat_completion,
    json_reply,
)
from tests.otlp_receiver import LoopbackOtlpReceiver, attributes_of, otlp_receiver

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO


SUCCESS_METADATA = {
    "contract_id",
    "contract_version",
    "compiler",
    "request_fingerprint",
    "output_fingerprint",
    "output_schema_valid",
    "adapter_id",
    "adapter_version",
    "finish_reason",
    "response_id",
    "requested_model",
    "ignored_policy_keys",
    "json_schema_strict",
}
# The example: 100 prompt tokens (40 cached), 50 completion tokens (30 reasoning).
CACHED_REASONING_USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 50,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 40},
    "completion_tokens_details": {"reasoning_tokens": 30},
}
CACHED_REASONING_DETAILS = {
    "input": 60,
    "output": 20,
    "total": 150,
    "input_cached_tokens": 40,
    "output_reasoning_tokens": 30,
}


def attrs(span: ReadableSpan | Any) -> dict[str, Any]:
    """Attributes of an in-memory span or of a span the loopback receiver decoded."""
    if isinstance(span, ReadableSpan):
        return dict(span.attributes or {})
    return attributes_of(span)


def attr(span: ReadableSpan | Any, key: str) -> Any:
    value = attrs(span).get(key)
    return json.loads(value) if isinstance(value, str) and value[:1] in "[{" else value


def metadata(span: ReadableSpan | Any) -> dict[str, Any]:
    """Server rule (``extractMetadata``/``parseMetadataAttribute``): the JSON object in
    ``langfuse.observation.metadata`` is the observation's metadata."""
    assert not [k for k in attrs(span) if k.startswith(A.OBSERVATION_METADATA + ".")]
    return dict(json.loads(attrs(span)[A.OBSERVATION_METADATA]))


def only_span(exporter: InMemorySpanExporter, runtime: Any) -> ReadableSpan:
    runtime.tracing.close()  # flush the adapter-owned processor
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def reply_with(server: LoopbackModelServer, content: Any = None, **kw: Any) -> None:
    body = chat_completion({"greeting": "Hello Ryan"} if content is None else content, **kw)
    server.set_responder(lambda r: json_reply(body))


def received_span(receiver: LoopbackOtlpReceiver) -> Any:
    assert len(receiver.spans) == 1, receiver.span_names()
    return receiver.spans[0]


def hex_id(raw: bytes) -> str:
    return raw.hex()


def test_success_generation_carries_every_field(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    reply_with(model_server, usage=CACHED_REASONING_USAGE, response_id="chatcmpl-42")
    runtime = make_runtime()
    receipt = runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    assert span.name == "greeting"
    # ObservationTypeMapper: langfuse.observation.type decides the observation type.
    assert attr(span, A.OBSERVATION_TYPE) == "generation"
    assert attr(span, A.VERSION) == "0.1.0"
    assert attr(span, A.TRACE_NAME) == "greeting"
    assert attr(span, A.OBSERVATION_INPUT) == [
        {"role": "system", "content": "You write concise greetings."},
        {"role": "user", "content": "Hello Ryan for Blinqx"},
    ]
    assert attr(span, A.OBSERVATION_OUTPUT) == {"greeting": "Hello Ryan"}
    assert attr(span, A.OBSERVATION_MODEL_PARAMETERS) == {"temperature": 0}
    assert attr(span, A.OBSERVATION_USAGE_DETAILS) == CACHED_REASONING_DETAILS
    assert attr(span, A.OBSERVATION_LEVEL) is None
    meta = metadata(span)
    assert set(meta) == SUCCESS_METADATA
    assert meta["request_fingerprint"] == receipt.request_fingerprint
    assert meta["output_fingerprint"] == receipt.output_fingerprint
    assert meta["output_schema_valid"] is True
    assert meta["json_schema_strict"] is True
    assert (meta["response_id"], meta["finish_reason"]) == ("chatcmpl-42", "stop")
    assert meta["contract_id"] == "greeting"  # a plain string, not JSON-quoted twice
    assert span.parent is None
    assert span.end_time is not None
    assert span.start_time is not None


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (CACHED_REASONING_USAGE, CACHED_REASONING_DETAILS),
        (
            {
                "prompt_tokens": 200,
                "completion_tokens": 90,
                "total_tokens": 290,
                "prompt_tokens_details": {"cached_tokens": 50, "audio_tokens": 20},
                "completion_tokens_details": {
                    "reasoning_tokens": 10,
                    "audio_tokens": 5,
                    "accepted_prediction_tokens": 30,
                    "rejected_prediction_tokens": 15,
                },
            },
            {
                "input": 130,
                "output": 30,
                "total": 290,
                "input_cached_tokens": 50,
                "input_audio_tokens": 20,
                "output_reasoning_tokens": 10,
                "output_audio_tokens": 5,
                "output_accepted_prediction_tokens": 30,
                "output_rejected_prediction_tokens": 15,
            },
        ),
        (
            {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
            {"input": 7, "output": 3, "total": 10},
        ),
    ],
    ids=["cached-reasoning", "audio-prediction", "plain"],
)
def test_usage_is_normalised_as_langfuse_normalises_openai_usage(
    usage: dict[str, Any],
    expected: dict[str, int],
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    # Server rule (ingestion/types.ts, UsageDetails / OpenAICompletionUsageSchema):
    # input = prompt - sum(prompt details), output = completion - sum(completion
    # details), each detail as input_<key>/output_<key>, total unchanged. Every key is
    # priced separately, so the parts must sum to the total.
    reply_with(model_server, usage=usage)
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        runtime.execute(greeting_request)
        runtime.close()
        details = attr(received_span(receiver), A.OBSERVATION_USAGE_DETAILS)
    assert details == expected
    parts = sum(v for k, v in details.items() if k != "total")
    assert parts == usage["total_tokens"]


@pytest.mark.parametrize(
    ("response_model", "expected"),
    [("gpt-4o-mini-2024-07-18", "gpt-4o-mini-2024-07-18"), (None, "test-model")],
    ids=["response-reports-model", "response-without-model"],
)
def test_generation_model_is_the_one_that_answered(
    response_model: str | None,
    expected: str,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    # Server rule (extractModelName): langfuse.observation.model.name is the model that
    # cost inference matches; the requested one (an alias, a deployment) stays in metadata.
    body = chat_completion({"greeting": "Hello Ryan"})
    if response_model is None:
        del body["model"]
    else:
        body["model"] = response_model
    model_server.set_responder(lambda r: json_reply(body))
    runtime = make_runtime()
    runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    assert attr(span, A.OBSERVATION_MODEL) == expected
    assert metadata(span)["requested_model"] == "test-model"


def test_a_provider_echoing_the_key_never_gets_it_exported(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    # A gateway that echoes the key in ``model`` and ``id``: every attribute Langfuse
    # receives (model name included, a plain string outside the JSON fields) is redacted.
    body = chat_completion({"greeting": "Hello Ryan"})
    body["model"], body["id"] = f"gpt-{MODEL_KEY}", f"chatcmpl-{MODEL_KEY}"
    model_server.set_responder(lambda r: json_reply(body))
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        runtime.execute(greeting_request)
        runtime.close()
        attributes = attributes_of(received_span(receiver))
    assert attributes[A.OBSERVATION_MODEL] == "gpt-[REDACTED]"
    assert not [key for key, value in attributes.items() if MODEL_KEY in str(value)]


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
    # Server rule (createObservationEvent): langfuse.observation.level sets the level.
    assert attr(span, A.OBSERVATION_LEVEL) == "WARNING"
    assert metadata(span)["output_schema_valid"] is False
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
    # Server rule: langfuse.observation.status_message is the status message.
    assert attr(span, A.OBSERVATION_STATUS_MESSAGE) == f"{code}: {raised.value.failure.detail}"
    assert attr(span, A.OBSERVATION_OUTPUT) is None
    meta = metadata(span)
    assert meta["error_code"] == code
    assert meta["error_detail"] == raised.value.failure.detail
    # No key whose value is None (the SDK drops them): no "null" strings in Langfuse.
    assert "output_schema_valid" not in meta
    assert None not in meta.values()
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


_HOST_KEYS = itertools.count()


def unique_key(public_key: str) -> str:
    """The SDK keeps one client per public key for the whole process: each test its own."""
    return f"{public_key}-{next(_HOST_KEYS)}"


def host_client(public_key: str) -> tuple[Langfuse, InMemorySpanExporter, TracerProvider]:
    host_exporter = InMemorySpanExporter()
    host_provider = TracerProvider()
    host = Langfuse(
        public_key=public_key,
        secret_key="sk-lf-host",
        base_url="http://127.0.0.1:9",
        tracer_provider=host_provider,
        span_exporter=host_exporter,
    )
    return host, host_exporter, host_provider


def test_nested_under_a_host_langfuse_observation(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    host, host_exporter, host_provider = host_client(unique_key("pk-lf-host-nested"))
    runtime = make_runtime()
    with host.start_as_current_observation(name="host-request", as_type="span"):
        runtime.execute(greeting_request)
    generation = only_span(exporter, runtime)
    host_provider.force_flush()
    (parent,) = [s for s in host_exporter.get_finished_spans() if s.name == "host-request"]
    assert generation.parent is not None
    assert generation.parent.span_id == parent.context.span_id
    assert generation.context.trace_id == parent.context.trace_id
    # Server rule (processSpan): a span with a parent and without as_root is not the
    # root, and without trace attributes it leaves the host's trace untouched.
    assert A.AS_ROOT not in attrs(generation)
    for key in (A.TRACE_NAME, A.TRACE_SESSION_ID, A.TRACE_USER_ID, A.TRACE_TAGS):
        assert key not in attrs(generation)
    host_provider.shutdown()


def test_explicit_trace_attributes_reach_a_host_trace(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    host, _, host_provider = host_client(unique_key("pk-lf-host-update"))
    runtime = make_runtime()
    with host.start_as_current_observation(name="host-request", as_type="span"):
        with trace_attributes(session_id="sess-9", user_id="user-3", tags=["crm"]):
            runtime.execute(greeting_request)
        runtime.execute(greeting_request)  # no call-site values: the host's trace wins
    runtime.tracing.close()
    explicit, plain = [s for s in exporter.get_finished_spans() if s.name == "greeting"]
    # Server rule (hasTraceUpdates): user.id, session.id and langfuse.trace.* on a
    # non-root span update its trace; the trace name stays the host's.
    assert attr(explicit, A.TRACE_SESSION_ID) == "sess-9"
    assert attr(explicit, A.TRACE_USER_ID) == "user-3"
    assert list(attr(explicit, A.TRACE_TAGS)) == ["crm"]
    assert A.TRACE_NAME not in attrs(explicit)
    assert not {A.TRACE_SESSION_ID, A.TRACE_USER_ID, A.TRACE_TAGS} & set(attrs(plain))
    host_provider.shutdown()


def test_plain_opentelemetry_host_span_gets_a_complete_langfuse_trace(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    host_tracer = TracerProvider().get_tracer("host-app")
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        with (
            host_tracer.start_as_current_span("http-handler") as host_span,
            trace_attributes(session_id="sess-1", user_id="user-7", tags=["nightly"]),
        ):
            runtime.execute(greeting_request)
        runtime.close()
        span = received_span(receiver)
    host = host_span.get_span_context()
    # Server rule (processSpan): isRootSpan = no parent OR langfuse.internal.as_root ==
    # "true"; a root span makes the full trace (name, user, session, tags, input, output).
    assert attr(span, A.AS_ROOT) is True
    assert hex_id(span.trace_id) == f"{host.trace_id:032x}"  # the host's trace id is kept
    assert hex_id(span.parent_span_id) == f"{host.span_id:016x}"
    assert attr(span, A.TRACE_NAME) == "greeting"
    assert attr(span, A.TRACE_SESSION_ID) == "sess-1"
    assert attr(span, A.TRACE_USER_ID) == "user-7"
    assert attr(span, A.TRACE_TAGS) == ["nightly"]
    assert attr(span, A.OBSERVATION_INPUT) is not None  # the trace's input, for a root
    assert attr(span, A.OBSERVATION_OUTPUT) == {"greeting": "Hello Ryan"}


def test_trace_attributes_apply_when_root(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    runtime = make_runtime()
    with trace_attributes(tags=["nightly", "crm"], session_id="sess-1", user_id="user-7"):
        runtime.execute(greeting_request)
    span = only_span(exporter, runtime)
    # Server rule (createTraceEvent, root): user.id, session.id, langfuse.trace.tags.
    assert attr(span, A.TRACE_SESSION_ID) == "sess-1"
    assert attr(span, A.TRACE_USER_ID) == "user-7"
    assert list(attr(span, A.TRACE_TAGS)) == ["nightly", "crm"]
    assert A.AS_ROOT not in attrs(span)  # a real root needs no as_root


def test_execute_traced_names_the_trace_of_the_receipt(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        runtime_with_project = make_runtime(
            langfuse_base_url=receiver.base_url, span_exporter=None, project_id="proj-1"
        )
        traced = runtime.execute_traced(greeting_request)
        assert traced.receipt == runtime.execute(greeting_request)
        with collect_traces() as found:
            linked = runtime_with_project.execute_traced(greeting_request)
        runtime.close()
        runtime_with_project.close()
        spans = {hex_id(s.span_id): s for s in receiver.spans}
    assert traced.trace_id is not None
    assert traced.observation_id is not None
    # Server rule: the observation id is the span id and the trace id is the span's.
    span = spans[traced.observation_id]
    assert hex_id(span.trace_id) == traced.trace_id
    assert traced.trace_url is None  # no project_id configured: no URL, and no lookup
    assert linked.trace_url == f"{receiver.base_url}/project/proj-1/traces/{linked.trace_id}"
    assert [ref.trace_id for ref in found] == [linked.trace_id]


def test_a_surface_hears_each_concurrent_executions_trace_url_once(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest
) -> None:
    """The ``langfuse`` entry point reports every execution's URL to the surface's
    callback as it starts: concurrent calls on one runtime never hear each other's."""
    heard: list[str] = []
    env = {
        "TEMPLIQX_MODEL": "m",
        "TEMPLIQX_MODEL_API_KEY": MODEL_KEY,
        "TEMPLIQX_MODEL_BASE_URL": model_server.base_url,
        "LANGFUSE_PUBLIC_KEY": "pk-lf-surface",
        "LANGFUSE_SECRET_KEY": "sk-lf-surface",
        "LANGFUSE_PROJECT_ID": "proj-1",
    }
    with otlp_receiver("ok") as receiver:
        env["LANGFUSE_BASE_URL"] = receiver.base_url
        runtime = runtime_factory(RuntimeOptions(env=env, on_trace_url=heard.append))
        assert isinstance(runtime, LangfuseTracedRuntime)
        with runtime, ThreadPoolExecutor(8) as pool:
            traced = list(pool.map(runtime.execute_traced, [greeting_request] * 16))
    urls = [str(t.trace_url) for t in traced if t.trace_url is not None]
    assert len(set(urls)) == 16
    assert sorted(heard) == sorted(urls)


def test_execute_traced_without_tracing_still_returns_the_receipt(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    traced = make_runtime(tracing=False).execute_traced(greeting_request)
    assert traced.receipt.output == {"greeting": "Hello Ryan"}
    assert (traced.trace_id, traced.observation_id, traced.trace_url) == (None, None, None)


def wait_for(predicate: Any, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("content", "value"),
    [({"greeting": "Hello Ryan"}, 1), ({"greeting": 42}, 0)],
    ids=["valid", "invalid"],
)
def test_schema_validity_is_a_boolean_score_on_the_generation(
    content: Any,
    value: int,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    reply_with(model_server, content)
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        traced = runtime.execute_traced(greeting_request)
        runtime.close()
        scores = list(receiver.scores)
    # Server rule (ScoreBody, dataType BOOLEAN): value is 0 or 1; the score hangs on the
    # generation through traceId + observationId.
    assert len(scores) == 1
    score = scores[0]
    assert score["name"] == "output_schema_valid"
    assert score["dataType"] == "BOOLEAN"
    assert score["value"] == value
    assert (score["traceId"], score["observationId"]) == (
        traced.trace_id,
        traced.observation_id,
    )


def test_schema_score_is_configurable_and_failures_score_nothing(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    model_server: LoopbackModelServer,
) -> None:
    with otlp_receiver("ok") as receiver:
        renamed = make_runtime(
            langfuse_base_url=receiver.base_url, span_exporter=None, schema_score_name="valid"
        )
        off = make_runtime(
            langfuse_base_url=receiver.base_url, span_exporter=None, schema_score_name=None
        )
        renamed.execute(greeting_request)
        off.execute(greeting_request)
        model_server.set_responder(lambda r: Reply(503, {}, b""))
        with pytest.raises(RuntimeFailureError):
            renamed.execute(greeting_request)  # a failure has no validity to score
        renamed.close()
        off.close()
        assert [s["name"] for s in receiver.scores] == ["valid"]
        assert len(receiver.spans) == 3


def test_a_failing_score_endpoint_costs_the_caller_nothing(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with otlp_receiver("hang", hang_s=10) as receiver:
        runtime = make_runtime(
            langfuse_base_url=receiver.base_url, span_exporter=None, flush_timeout_s=1.0
        )
        started = time.monotonic()
        receipts = [runtime.execute(greeting_request) for _ in range(20)]
        assert time.monotonic() - started < 2.0
        assert all(r.output_schema_valid for r in receipts)
        closing = time.monotonic()
        runtime.close()
        assert time.monotonic() - closing < 1.0 + 1.0  # close() is bounded


def with_prompt_extension(reference_dir: Path, value: Any) -> CompiledInteraction:
    document = yaml.safe_load((reference_dir / "demo" / "greeting.yaml").read_text("utf-8"))
    document["extensions"] = {
        "langfuse.prompt": {
            "capability": PROMPT_CAPABILITY,
            "schema": {"type": "object", "required": ["name", "version"]},
            "value": value,
        }
    }
    result = compile_contract(
        Contract.model_validate(document),
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        ["structured_output", PROMPT_CAPABILITY],
    )
    assert result.interaction is not None, result.diagnostics
    return result.interaction


@pytest.mark.parametrize(
    ("value", "linked"),
    [
        ({"name": "greeting-prompt", "version": 3}, ("greeting-prompt", 3)),
        ({"name": "greeting-prompt", "version": "latest"}, None),
    ],
    ids=["name-and-version", "no-version-number"],
)
def test_a_contract_links_its_generation_to_a_langfuse_prompt(
    value: Mapping[str, Any],
    linked: tuple[str, int] | None,
    reference_dir: Path,
    make_runtime: RuntimeFactory,
) -> None:
    interaction = with_prompt_extension(reference_dir, value)
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        assert PROMPT_CAPABILITY in runtime.descriptor().capabilities
        runtime.execute(ExecutionRequest(interaction=interaction))
        runtime.close()
        span = received_span(receiver)
    # Server rule (createObservationEvent): prompts link only to GENERATION observations,
    # by langfuse.observation.prompt.name and an integer prompt.version, both or neither.
    assert attr(span, A.OBSERVATION_TYPE) == "generation"
    found = (attr(span, A.OBSERVATION_PROMPT_NAME), attr(span, A.OBSERVATION_PROMPT_VERSION))
    assert found == (linked or (None, None))


def test_a_host_client_with_the_same_public_key_keeps_its_pipeline_to_itself(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    # The SDK keeps one client per public key and hands it to any later Langfuse(...)
    # with that key. The adapter's own path builds no Langfuse client, so a host's client
    # with the same key neither captures its generations nor gets flushed by close().
    shared = unique_key("pk-lf-shared")
    host, host_exporter, host_provider = host_client(shared)
    before = otel_trace.get_tracer_provider()
    runtime = make_runtime(public_key=shared)
    runtime.execute(greeting_request)
    runtime.close()
    assert otel_trace.get_tracer_provider() is before  # never the global provider
    assert [s.name for s in exporter.get_finished_spans()] == ["greeting"]
    host_provider.force_flush()
    assert host_exporter.get_finished_spans() == ()
    with host.start_as_current_observation(name="after-close", as_type="span"):
        pass
    host_provider.force_flush()
    assert [s.name for s in host_exporter.get_finished_spans()] == ["after-close"]
    host_provider.shutdown()


def test_receipt_is_identical_with_tracing_on_and_off(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    traced = make_runtime().execute(greeting_request)
    untraced = make_runtime(tracing=False).execute(greeting_request)
    assert traced == untraced
