"""The conformance kit catches each invariant violation (deliberately broken adapters)."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from templiqx_core import (
    AdapterDescriptor,
    CompleteEvent,
    DeltaEvent,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    RuntimeAdapter,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
)
from templiqx_core._ports import EventSink
from templiqx_core.adapters import build_receipt
from templiqx_core.conformance import (
    ConformanceError,
    check_adapter,
    check_cancellation,
    check_concurrent_use,
    check_failure_projection,
    check_sink_exception_propagates,
    check_streaming_parity,
    validate_event_order,
)
from tests.conftest import REPO_ROOT

DESCRIPTOR = AdapterDescriptor(id="broken", version="0", capabilities=["structured_output"])


class Base(RuntimeAdapter):
    def descriptor(self) -> AdapterDescriptor:
        return DESCRIPTOR

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        return build_receipt(DESCRIPTOR, request.interaction, request.fixture_output)

    def fail(self) -> RuntimeFailureError:
        failure = RuntimeFailure.for_adapter(DESCRIPTOR, RuntimeFailureCode.UNAVAILABLE, "down")
        return RuntimeFailureError(failure)


class DifferentStreamedReceipt(Base):
    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        receipt = self.execute(request)
        altered = build_receipt(DESCRIPTOR, request.interaction, {"other": True})
        sink(CompleteEvent.from_receipt(altered))
        return receipt


class TwoTerminals(Base):
    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        receipt = self.execute(request)
        sink(CompleteEvent.from_receipt(receipt))
        sink(CompleteEvent.from_receipt(receipt))
        return receipt


class DeltaAfterTerminal(Base):
    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        receipt = self.execute(request)
        sink(CompleteEvent.from_receipt(receipt))
        sink(DeltaEvent(text="late"))
        return receipt


class SilentFailure(Base):
    """Like the Rust default: raises without emitting Failed."""

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        raise self.fail()

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        return self.execute(request)


class WrongFailedCode(Base):
    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        sink(FailedEvent(code="TQX_RUNTIME_TIMEOUT", message="x"))
        raise self.fail()


class SwallowsSinkErrors(Base):
    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        receipt = self.execute(request)
        with contextlib.suppress(Exception):
            sink(CompleteEvent.from_receipt(receipt))
        return receipt


class NotThreadSafe(Base):
    """Keeps the request in shared state between two steps: concurrent calls cross-talk."""

    def __init__(self) -> None:
        self.current: ExecutionRequest | None = None
        self.calls = 0
        self.lock = threading.Lock()

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self.current = request
        with self.lock:
            self.calls += 1
            n = self.calls
        time.sleep(0.001)
        assert self.current is not None
        return build_receipt(DESCRIPTOR, self.current.interaction, {"call": n % 2})


@pytest.mark.parametrize(
    ("adapter", "check", "message"),
    [
        (DifferentStreamedReceipt(), check_streaming_parity, "differs from the returned"),
        (TwoTerminals(), check_streaming_parity, "2 terminal events"),
        (DeltaAfterTerminal(), check_streaming_parity, "not last"),
        (SilentFailure(), check_failure_projection, "0 terminal events"),
        (WrongFailedCode(), check_failure_projection, "differs from raised"),
        (SwallowsSinkErrors(), check_sink_exception_propagates, "returned normally"),
        (NotThreadSafe(), check_concurrent_use, "concurrent receipts differed"),
    ],
)
def test_kit_catches_each_violation(
    adapter: RuntimeAdapter, check: object, message: str, bli61_request: ExecutionRequest
) -> None:
    assert callable(check)
    with pytest.raises(ConformanceError, match=message):
        check(adapter, bli61_request)


def test_failure_projection_needs_a_raise(bli61_request: ExecutionRequest) -> None:
    with pytest.raises(ConformanceError, match="did not raise"):
        check_failure_projection(Base(), bli61_request)


def test_event_order_rules() -> None:
    with pytest.raises(ConformanceError, match="0 terminal events"):
        validate_event_order([])
    failed = FailedEvent(code="TQX_IO", message="x")
    assert validate_event_order([DeltaEvent(text="a"), failed]) is failed


def test_default_projection_passes_every_check(bli61_request: ExecutionRequest) -> None:
    class Failing(Base):
        def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
            raise self.fail()

    passed = check_adapter(
        Base(), bli61_request, failing_request=bli61_request, failing_adapter=Failing()
    )
    assert passed == [
        "streaming_parity",
        "sink_exception_propagates",
        "concurrent_use",
        "failure_projection",
    ]


class EndsAtOnce(Base):
    """Streams its deltas and ``Complete`` without awaiting: done before any cancel."""

    async def aexecute_streaming(
        self, request: ExecutionRequest, sink: EventSink
    ) -> ExecutionReceipt:
        receipt = self.execute(request)
        sink(DeltaEvent(text="a"))
        sink(CompleteEvent.from_receipt(receipt))
        return receipt


def test_async_cancellation_names_a_call_that_ended_before_its_cancel(
    bli61_request: ExecutionRequest,
) -> None:
    with pytest.raises(ConformanceError, match="the call to cancel ended before it was cancelled"):
        check_cancellation(
            EndsAtOnce(), bli61_request, connection_released=lambda: True, asynchronous=True
        )


CTRL_C = textwrap.dedent(
    """
    import asyncio, sys
    from templiqx_core import DeltaEvent
    from templiqx_core.conformance import check_cancellation
    from tests.core.conftest import compile_reference
    from tests.core.test_conformance import Base, ExecutionRequest
    from tests.conftest import REPO_ROOT, read_json

    class Hangs(Base):
        async def aexecute_streaming(self, request, sink):
            sink(DeltaEvent(text="a"))
            await asyncio.sleep(1000)

    reference = REPO_ROOT / "reference"
    interaction = compile_reference(reference, sys.argv[1], sys.argv[2])
    request = ExecutionRequest(interaction=interaction, fixture_output={})
    print("ready", flush=True)
    check_cancellation(
        Hangs(), request, connection_released=bool, cancel_after_s=30, asynchronous=True
    )
    """
)


def test_ctrl_c_during_an_async_check_interrupts_it_and_the_process_exits() -> None:
    """The host's Ctrl-C is its own, never the cancelled call's outcome (a verdict); the
    check's loop ends with its tasks cancelled, none destroyed pending."""
    contract, request = "bli-61-date-term-extraction.yaml", "bli-61-request.json"
    process = subprocess.Popen(
        [sys.executable, "-c", CTRL_C, contract, request],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert process.stdout is not None
    assert process.stdout.readline().strip() == "ready"
    time.sleep(1.0)  # the check waits on its cancel_after_s
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=20)
    assert "KeyboardInterrupt" in err
    assert "ConformanceError" not in err
    assert "Task was destroyed but it is pending" not in err
    assert process.returncode == 1 or process.returncode == -signal.SIGINT


class CompleteBeforeItsDeltas(Base):
    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        receipt = self.execute(request)
        sink(CompleteEvent.from_receipt(receipt))
        sink(DeltaEvent(text="a"))
        return receipt


def test_cancellation_refuses_a_stream_that_emitted_complete_before_the_cancel(
    bli61_request: ExecutionRequest,
) -> None:
    with pytest.raises(ConformanceError, match="a cancelled stream emitted Complete"):
        check_cancellation(
            CompleteBeforeItsDeltas(), bli61_request, connection_released=lambda: True
        )
