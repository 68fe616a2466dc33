"""A Langfuse outage costs the caller nothing: executes succeed, close() stays bounded."""

from __future__ import annotations

import base64
import time

import pytest

from templiqx_core import ExecutionRequest
from tests.conftest import SECRET_KEY, RuntimeFactory, closed_port
from tests.otlp_receiver import otlp_receiver

CALLS = 50


@pytest.mark.parametrize("mode", ["refused", "error", "hang"])
def test_executes_succeed_and_close_is_bounded(
    mode: str, make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with otlp_receiver("error" if mode == "error" else "hang", hang_s=20) as receiver:
        base = f"http://127.0.0.1:{closed_port()}" if mode == "refused" else receiver.base_url
        runtime = make_runtime(langfuse_base_url=base, span_exporter=None, flush_timeout_s=1.0)
        started = time.monotonic()
        receipts = [runtime.execute(greeting_request) for _ in range(CALLS)]
        elapsed = time.monotonic() - started
        assert all(r.output == {"greeting": "Hello Ryan"} for r in receipts)
        assert elapsed < 2.0, f"{CALLS} executes took {elapsed:.2f} s with Langfuse {mode}"
        closing = time.monotonic()
        runtime.close()
        assert time.monotonic() - closing < 1.0 + 1.0


def test_healthy_receiver_gets_every_generation_once(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        for _ in range(20):
            runtime.execute(greeting_request)
        runtime.close()
        assert receiver.span_names() == ["greeting"] * 20
        public_key = runtime.langfuse_config.keys()[0]
        token = base64.b64encode(f"{public_key}:{SECRET_KEY}".encode()).decode()
        assert len(receiver.scores) == 20  # one output_schema_valid score per generation
        paths = {request.path for request in receiver.requests}
        assert "/api/public/otel/v1/traces" in paths
        for request in receiver.requests:
            assert request.headers["authorization"] == f"Basic {token}"
        for request in receiver.requests:
            if request.path == "/api/public/otel/v1/traces":
                assert request.headers["x-langfuse-public-key"] == public_key
