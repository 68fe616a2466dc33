"""A host's own OpenTelemetry settings, meant for its own collector, change nothing on the
Langfuse export (spans and scores); ``OTEL_SDK_DISABLED`` turns it off, with one warning."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_core import ExecutionRequest
from tests.conftest import REPO_ROOT, RuntimeFactory, closed_port
from tests.otlp_receiver import LoopbackOtlpReceiver, attributes_of, otlp_receiver
from tests.reliability.test_export_process_exit import SCRIPT

TRACES = "/api/public/otel/v1/traces"
MISSING = "/nonexistent/host-otel"  # files a host's collector would use; not here


@pytest.fixture
def receiver() -> Iterator[LoopbackOtlpReceiver]:
    with otlp_receiver("ok") as running:
        yield running


HOST_SETTINGS = {
    # TLS for the host's collector: a private CA and its client identity (mTLS).
    "tls": {
        "OTEL_EXPORTER_OTLP_CERTIFICATE": f"{MISSING}/ca.pem",
        "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE": f"{MISSING}/ca.pem",
        "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE": f"{MISSING}/client.pem",
        "OTEL_EXPORTER_OTLP_CLIENT_KEY": f"{MISSING}/client.key",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE": f"{MISSING}/client.pem",
        "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY": f"{MISSING}/client.key",
    },
    "endpoint-headers": {
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{closed_port()}",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"http://127.0.0.1:{closed_port()}/v1/traces",
        "OTEL_EXPORTER_OTLP_HEADERS": "x-host-tenant=acme,content-encoding=identity",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS": "x-host-tenant=acme,authorization=Bearer host",
    },
    "compression-timeout": {
        "OTEL_EXPORTER_OTLP_COMPRESSION": "deflate",
        "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION": "none",
        "OTEL_EXPORTER_OTLP_TIMEOUT": "0.000001",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT": "0.000001",
        "OTEL_BSP_MAX_QUEUE_SIZE": "1",
        "OTEL_BSP_MAX_EXPORT_BATCH_SIZE": "1",
    },
}
LIMITS = {
    "OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT": "8",
    "OTEL_ATTRIBUTE_COUNT_LIMIT": "4",
    "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT": "5",
    "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT": "5",
}


@pytest.mark.parametrize("settings", list(HOST_SETTINGS), ids=list(HOST_SETTINGS))
def test_a_hosts_otel_exporter_settings_change_nothing_on_the_langfuse_export(
    settings: str,
    receiver: LoopbackOtlpReceiver,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Before: the client certificate made every POST fail (and would have been shown to
    Langfuse) and host headers reached Langfuse."""
    for name, value in HOST_SETTINGS[settings].items():
        monkeypatch.setenv(name, value)
    runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
    for _ in range(3):
        runtime.execute(greeting_request)
    runtime.close()
    assert receiver.span_names() == ["greeting"] * 3
    assert len(receiver.scores) == 3
    attributes = attributes_of(receiver.spans[0])
    assert attributes[A.OBSERVATION_TYPE] == "generation"
    assert attributes[A.VERSION] == greeting_request.interaction.contract_version
    assert attributes[A.OBSERVATION_INPUT].startswith("[{")  # whole, not cut to 5 chars
    for request in receiver.requests:
        assert "x-host-tenant" not in request.headers
        assert request.headers["authorization"].startswith("Basic ")
        if request.path == TRACES:
            assert request.headers["content-encoding"] == "gzip"


def test_a_hosts_span_limits_set_before_start_up_strip_nothing(
    receiver: LoopbackOtlpReceiver,
) -> None:
    """Read when OTel's classes are built, so set before the process starts, as a host
    does. Before: with a count limit of 8 a generation lost its type and version."""
    contract = str(REPO_ROOT / "reference" / "demo" / "greeting.yaml")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, receiver.base_url, "exit", contract],
        env={**os.environ, **LIMITS}, capture_output=True, text=True, timeout=60,
        cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    assert len(receiver.spans) == 25
    attributes = attributes_of(receiver.spans[0])
    assert attributes[A.OBSERVATION_TYPE] == "generation"
    assert attributes[A.VERSION] == "0.1.0"
    assert attributes[A.OBSERVATION_INPUT].startswith("[{")  # whole, not cut to 5 chars
    assert len(attributes) > 8


def test_otel_sdk_disabled_turns_the_export_off_with_one_warning_naming_it(
    receiver: LoopbackOtlpReceiver,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before: keys set, tracing reported on, nothing exported and nothing said."""
    monkeypatch.setenv("OTEL_SDK_DISABLED", "True")
    with caplog.at_level(logging.WARNING, logger="templiqx_langfuse"):
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        traced = runtime.execute_traced(greeting_request)
        runtime.execute(greeting_request)
        runtime.close()
    warnings = [r.getMessage() for r in caplog.records if r.name == "templiqx_langfuse"]
    assert len(warnings) == 1
    assert "OTEL_SDK_DISABLED" in warnings[0]
    assert traced.trace_id is None
    assert traced.receipt.output_schema_valid
    assert receiver.requests == []
