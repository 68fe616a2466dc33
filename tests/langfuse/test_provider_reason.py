"""The provider's own reason for an error response (issue 33 item 4): the recorded OpenAI
400 served from the loopback server reaches the exception's detail, the envelope's
diagnostic and the generation's status message, redacted like everything else."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest, RenderRequest, RuntimeFailureError, execute_contract
from tests.conftest import BOTH_IO, CORPUS, MODEL_KEY, REFERENCE, RuntimeFactory
from tests.loopback import LoopbackModelServer, Reply

pytestmark = BOTH_IO

RECORDED = CORPUS / "provider-responses" / "chat-completions"
STRICT_400 = json.loads((RECORDED / "openai-400-strict-tool-invalid-schema.json").read_text())
ERROR = STRICT_400["response"]["body"]["error"]


def serve_error(server: LoopbackModelServer, status: int, error: dict[str, Any]) -> None:
    body = json.dumps({"error": error}).encode()
    server.set_responder(lambda r: Reply(status, {"content-type": "application/json"}, body))


def test_the_recorded_400_carries_message_type_param_and_code(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    serve_error(model_server, 400, ERROR)
    runtime = make_runtime()
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    detail = raised.value.failure.detail
    for key in ("message", "type", "param", "code"):
        assert f"{key}={ERROR[key]}" in detail
    assert raised.value.code == "TQX_RUNTIME_PERMANENT"
    assert "refused the output schema" not in detail  # a tool's schema, not the output's
    runtime.tracing.close()
    (span,) = exporter.get_finished_spans()
    status = (span.attributes or {})[A.OBSERVATION_STATUS_MESSAGE]
    assert status == f"TQX_RUNTIME_PERMANENT: {detail}"


def test_a_refused_output_schema_says_so_in_the_envelope(
    make_runtime: RuntimeFactory, model_server: LoopbackModelServer
) -> None:
    error = {
        "message": "Invalid schema for response_format 'templiqx_output': In context=(), "
        "'additionalProperties' is required to be supplied and to be false.",
        "type": "invalid_request_error",
        "param": "response_format",
        "code": None,
    }
    serve_error(model_server, 400, error)
    envelope = execute_contract(
        REFERENCE / "demo" / "greeting.yaml",
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        runtime=make_runtime(tracing=False),
    )
    assert not envelope.ok
    (diagnostic,) = envelope.diagnostics
    assert diagnostic.code == "TQX_RUNTIME_PERMANENT"
    assert "the provider refused the output schema" in diagnostic.message
    assert "param=response_format" in diagnostic.message
    assert "code=" not in diagnostic.message  # a null code is left out


def test_a_secret_echoed_in_the_providers_message_is_redacted(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    serve_error(model_server, 401, {"message": f"Incorrect API key provided: {MODEL_KEY}"})
    runtime = make_runtime()
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    assert "Incorrect API key provided: [REDACTED]" in raised.value.failure.detail
    assert MODEL_KEY not in str(raised.value)
    runtime.tracing.close()
    (span,) = exporter.get_finished_spans()
    assert MODEL_KEY not in json.dumps(dict(span.attributes or {}))


def test_a_secret_cut_by_the_reasons_bound_leaves_none_of_itself(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    """A 1 MiB error body echoing the key where the 1 KiB bound cuts it: redacted whole
    first, so not even the key's start is left in the detail or the span."""
    message = "x" * 990 + MODEL_KEY + "y" * (1 << 20)
    serve_error(model_server, 401, {"message": message})
    runtime = make_runtime()
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    detail = raised.value.failure.detail
    assert MODEL_KEY[:6] not in detail
    assert len(detail.encode()) <= 1024 + len("model gateway returned HTTP 401: ")
    assert detail.endswith("...")
    runtime.tracing.close()
    (span,) = exporter.get_finished_spans()
    assert MODEL_KEY[:6] not in json.dumps(dict(span.attributes or {}))
