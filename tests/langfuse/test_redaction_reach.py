"""Every string that leaves for Langfuse passes the redactor: trace tags included, on the
adapter-owned export path as on a host's span exporter; and how short a key may be."""

from __future__ import annotations

import gzip
import logging

import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest
from templiqx_langfuse import Redactor, trace_attributes
from tests.conftest import MODEL_KEY, SECRET_KEY, RuntimeFactory
from tests.loopback import Reply, ServerRequest
from tests.otlp_receiver import attributes_of, otlp_receiver
from tests.reliability.test_export_losses import receiver


def wire_body(request: ServerRequest) -> bytes:
    """What a request carried (spans gzip-compressed, scores as sent)."""
    gzipped = request.headers.get("content-encoding") == "gzip"
    return gzip.decompress(request.body) if gzipped else request.body


def test_a_secret_in_trace_tags_is_redacted_on_a_host_exporter(
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    runtime = make_runtime()
    with trace_attributes(tags=["nightly", f"key={MODEL_KEY}"]):
        runtime.execute(greeting_request)
    runtime.close()
    (span,) = exporter.get_finished_spans()
    assert list((span.attributes or {})[A.TRACE_TAGS]) == ["nightly", "key=[REDACTED]"]


def test_a_secret_in_trace_tags_is_redacted_on_the_wire(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        with trace_attributes(tags=[MODEL_KEY, "crm"]):
            runtime.execute(greeting_request)
        runtime.close()
        (span,) = receiver.spans
        raw = b"".join(map(wire_body, receiver.requests))
    assert attributes_of(span)[A.TRACE_TAGS] == ["[REDACTED]", "crm"]
    assert MODEL_KEY.encode() not in raw


def test_keys_of_four_characters_are_redacted_shorter_ones_are_not() -> None:
    redactor = Redactor(["abcd", "xyz"])
    assert redactor.text("abcd xyz") == "[REDACTED] xyz"  # the README says so


def test_what_a_generation_opens_with_is_redacted_too(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    """Contract id and version, the model asked for, the release: they come from the
    contract and the configuration, and still never carry a key to Langfuse."""
    interaction = greeting_request.interaction.model_copy(
        update={"contract_id": f"c-{MODEL_KEY}", "contract_version": f"v-{MODEL_KEY}"}
    )
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        runtime.execute(ExecutionRequest(interaction=interaction))
        runtime.close()
        (span,) = receiver.spans
        raw = b"".join(map(wire_body, receiver.requests))
    attributes = attributes_of(span)
    assert span.name == "c-[REDACTED]"
    assert attributes[A.VERSION] == "v-[REDACTED]"
    assert attributes[A.TRACE_NAME] == "c-[REDACTED]"
    assert MODEL_KEY.encode() not in raw


def test_a_langfuse_echoing_the_secret_key_in_its_reason_phrase_is_redacted_in_the_log(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OTel's OTLP exporter logs the reason phrase of a refused export at ERROR."""
    refuse = Reply(status=401, reason=f"Unauthorized: {SECRET_KEY}", body=b"<html>no</html>")
    with receiver(lambda request: refuse) as server, caplog.at_level(logging.DEBUG):
        runtime = make_runtime(langfuse_base_url=server.base_url, span_exporter=None)
        runtime.execute(greeting_request)
        runtime.close()
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "reason: Unauthorized: [REDACTED]" in logged
    assert SECRET_KEY not in logged
