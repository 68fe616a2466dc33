"""The adapter keeps the port's default projection on purpose, and passes the kit."""

from __future__ import annotations

import pytest

from templiqx_core import (
    CompleteEvent,
    ExecutionRequest,
    RuntimeAdapter,
    RuntimeFailureError,
    StreamEvent,
)
from templiqx_core.conformance import check_adapter
from templiqx_langfuse import LangfuseTracedRuntime
from tests.conftest import RuntimeFactory
from tests.loopback import LoopbackModelServer, Reply


def test_does_not_override_execute_streaming() -> None:
    assert LangfuseTracedRuntime.execute_streaming is RuntimeAdapter.execute_streaming


def test_one_complete_event_with_the_receipt(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    events: list[StreamEvent] = []
    receipt = make_runtime().execute_streaming(greeting_request, events.append)
    assert events == [CompleteEvent.from_receipt(receipt)]


def test_passes_the_conformance_kit(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    failing_server = LoopbackModelServer(lambda request: Reply(503)).start()
    try:
        failing = make_runtime(base_url=failing_server.base_url)
        passed = check_adapter(
            make_runtime(),
            greeting_request,
            failing_request=greeting_request,
            failing_adapter=failing,
            threads=8,
            calls=5,
        )
    finally:
        failing_server.stop()
    assert "failure_projection" in passed


def test_failure_stream_then_exception(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(lambda request: Reply(429, {"retry-after": "1"}))
    events: list[StreamEvent] = []
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime().execute_streaming(greeting_request, events.append)
    assert [e.kind for e in events] == ["Failed"]
    assert events[0].code == raised.value.code == "TQX_RUNTIME_RATE_LIMITED"  # type: ignore[union-attr]
