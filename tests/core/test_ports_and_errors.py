from __future__ import annotations

import pytest

from templiqx_core import (
    AdapterDescriptor,
    CompleteEvent,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    InvalidData,
    InvalidPath,
    IoFailure,
    NotFound,
    PortError,
    RuntimeAdapter,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
    StreamEvent,
    Unsupported,
    fingerprint,
    to_diagnostic,
)
from templiqx_core.adapters import build_receipt

DESCRIPTOR = AdapterDescriptor(id="plain", version="1.0", capabilities=["structured_output"])


class PlainAdapter(RuntimeAdapter):
    """Implements only execute: the default streaming projection is under test."""

    def __init__(self, error: PortError | None = None) -> None:
        self.error = error

    def descriptor(self) -> AdapterDescriptor:
        return DESCRIPTOR

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        if self.error is not None:
            raise self.error
        return build_receipt(DESCRIPTOR, request.interaction, request.fixture_output)


def test_default_streaming_emits_one_complete_with_the_execute_receipt(
    bli61_request: ExecutionRequest,
) -> None:
    events: list[StreamEvent] = []
    receipt = PlainAdapter().execute_streaming(bli61_request, events.append)
    assert events == [CompleteEvent.from_receipt(receipt)]
    assert receipt == PlainAdapter().execute(bli61_request)


def test_default_streaming_failure_emits_failed_then_reraises_same_error(
    bli61_request: ExecutionRequest,
) -> None:
    failure = RuntimeFailure.for_adapter(DESCRIPTOR, RuntimeFailureCode.TIMEOUT, "too slow")
    error = RuntimeFailureError(failure)
    events: list[StreamEvent] = []
    with pytest.raises(RuntimeFailureError) as raised:
        PlainAdapter(error).execute_streaming(bli61_request, events.append)
    assert raised.value is error
    assert events == [
        FailedEvent(
            code="TQX_RUNTIME_TIMEOUT", message="runtime failure TQX_RUNTIME_TIMEOUT: too slow"
        )
    ]


def test_sink_exception_propagates_unchanged(bli61_request: ExecutionRequest) -> None:
    class Cancel(Exception):
        pass

    cancel = Cancel()

    def sink(event: StreamEvent) -> None:
        raise cancel

    with pytest.raises(Cancel) as raised:
        PlainAdapter().execute_streaming(bli61_request, sink)
    assert raised.value is cancel


@pytest.mark.parametrize(
    ("error_type", "code", "display"),
    [
        (NotFound, "TQX_NOT_FOUND", "not found"),
        (InvalidPath, "TQX_PATH_INVALID", "invalid path"),
        (Unsupported, "TQX_UNSUPPORTED", "unsupported"),
        (IoFailure, "TQX_IO", "I/O error"),
        (InvalidData, "TQX_DATA_INVALID", "invalid data"),
    ],
)
def test_port_errors_carry_stable_codes(
    error_type: type[PortError], code: str, display: str
) -> None:
    error = error_type("what went wrong")
    assert error.code == code
    assert isinstance(error, PortError)
    # The reference application's port_diagnostic: its PortError Display, pointer "".
    assert to_diagnostic(error).to_json() == {
        "code": code,
        "severity": "error",
        "message": f"{display}: what went wrong",
        "json_pointer": "",
    }


def test_retryable_codes() -> None:
    retryable = {code for code in RuntimeFailureCode if code.retryable}
    assert retryable == {
        RuntimeFailureCode.TIMEOUT,
        RuntimeFailureCode.RATE_LIMITED,
        RuntimeFailureCode.UNAVAILABLE,
    }
    assert {code.value for code in RuntimeFailureCode} == {
        "TQX_RUNTIME_TIMEOUT",
        "TQX_RUNTIME_RATE_LIMITED",
        "TQX_RUNTIME_UNAVAILABLE",
        "TQX_RUNTIME_INVALID_RESPONSE",
        "TQX_RUNTIME_PERMANENT",
        "TQX_HOST_RETRY_EXHAUSTED",
    }


def test_runtime_failure_fingerprint_and_diagnostic_help() -> None:
    failure = RuntimeFailure.for_adapter(
        DESCRIPTOR,
        RuntimeFailureCode.RATE_LIMITED,
        "model gateway returned HTTP 429",
        retry_after_ms=1500,
        scenario_id="s1",
    )
    assert failure.fingerprint == fingerprint(
        {
            "adapter": "plain",
            "code": "TQX_RUNTIME_RATE_LIMITED",
            "detail": "model gateway returned HTTP 429",
        }
    )
    error = RuntimeFailureError(failure)
    assert error.code == "TQX_RUNTIME_RATE_LIMITED"
    assert error.retryable
    diagnostic = to_diagnostic(error)
    assert diagnostic.code == "TQX_RUNTIME_RATE_LIMITED"
    assert diagnostic.help == (
        "adapter=plain version=1.0 scenario=s1 retry_after_ms=1500 "
        f"fingerprint={failure.fingerprint}"
    )


def test_a_runtime_failure_keeps_its_public_help_line() -> None:
    """``RuntimeFailure.help_line()`` is public (in the API reference): a host that logs a
    failure the reference's way calls it, and ``to_diagnostic`` says the same."""
    failure = RuntimeFailure.for_adapter(DESCRIPTOR, RuntimeFailureCode.TIMEOUT, "late")
    assert failure.help_line() == (
        "adapter=plain version=1.0 scenario=none retry_after_ms=none "
        f"fingerprint={failure.fingerprint}"
    )
    assert to_diagnostic(RuntimeFailureError(failure)).help == failure.help_line()
