"""The retrying wrapper, with an injected sleep: no test waits for real."""

from __future__ import annotations

import pytest

from templiqx_core import (
    ExecutionRequest,
    InvalidData,
    RuntimeFailureCode,
    RuntimeFailureError,
    ScriptedFailure,
    ScriptedRuntime,
    ScriptedSuccess,
)
from templiqx_core.conformance import check_adapter
from templiqx_langfuse import RetryingRuntime

CODE = RuntimeFailureCode


def scripted(*outcomes: ScriptedFailure | ScriptedSuccess) -> ScriptedRuntime:
    return ScriptedRuntime(list(outcomes))


@pytest.fixture
def request_(greeting_request: ExecutionRequest) -> ExecutionRequest:
    return greeting_request.model_copy(update={"fixture_output": {"greeting": "Hello Ryan"}})


def test_retries_retryable_codes_then_succeeds(request_: ExecutionRequest) -> None:
    sleeps: list[float] = []
    inner = scripted(
        ScriptedFailure(CODE.UNAVAILABLE, "down"),
        ScriptedFailure(CODE.TIMEOUT, "slow"),
        ScriptedSuccess(),
    )
    runtime = RetryingRuntime(inner, attempts=3, base_wait_s=0.5, max_wait_s=4, sleep=sleeps.append)
    receipt = runtime.execute(request_)
    assert receipt.output == {"greeting": "Hello Ryan"}
    assert len(sleeps) == 2
    assert all(0 <= s <= 4 for s in sleeps)
    assert runtime.descriptor() == inner.descriptor()


def test_honours_and_caps_retry_after(request_: ExecutionRequest) -> None:
    sleeps: list[float] = []
    inner = scripted(
        ScriptedFailure(CODE.RATE_LIMITED, "slow down", retry_after_ms=1500),
        ScriptedFailure(CODE.RATE_LIMITED, "slow down", retry_after_ms=90_000),
        ScriptedSuccess(),
    )
    RetryingRuntime(inner, attempts=3, max_wait_s=10, sleep=sleeps.append).execute(request_)
    assert sleeps == [1.5, 10]


def test_exhaustion_names_the_last_code(request_: ExecutionRequest) -> None:
    sleeps: list[float] = []
    inner = scripted(
        ScriptedFailure(CODE.UNAVAILABLE, "down"),
        ScriptedFailure(CODE.RATE_LIMITED, "busy", retry_after_ms=100),
    )
    with pytest.raises(RuntimeFailureError) as raised:
        RetryingRuntime(inner, attempts=3, sleep=sleeps.append).execute(request_)
    error = raised.value
    assert error.code == "TQX_HOST_RETRY_EXHAUSTED"
    assert "TQX_RUNTIME_RATE_LIMITED" in error.failure.detail
    assert "3 attempt" in error.failure.detail
    assert len(sleeps) == 2


@pytest.mark.parametrize("code", [CODE.PERMANENT, CODE.INVALID_RESPONSE])
def test_never_retries_permanent_failures(
    request_: ExecutionRequest, code: RuntimeFailureCode
) -> None:
    sleeps: list[float] = []
    inner = scripted(ScriptedFailure(code, "no"), ScriptedSuccess())
    with pytest.raises(RuntimeFailureError) as raised:
        RetryingRuntime(inner, attempts=5, sleep=sleeps.append).execute(request_)
    assert raised.value.code == code.value
    assert sleeps == []


def test_deadline_stops_before_a_wait_that_would_pass_it(request_: ExecutionRequest) -> None:
    sleeps: list[float] = []
    inner = scripted(ScriptedFailure(CODE.RATE_LIMITED, "busy", retry_after_ms=60_000))
    with pytest.raises(RuntimeFailureError) as raised:
        RetryingRuntime(
            inner, attempts=10, max_wait_s=60, deadline_s=5, sleep=sleeps.append
        ).execute(request_)
    assert raised.value.code == "TQX_HOST_RETRY_EXHAUSTED"
    assert sleeps == []


def test_rejects_nonsense_settings() -> None:
    with pytest.raises(InvalidData):
        RetryingRuntime(scripted(ScriptedSuccess()), attempts=0)


def test_settings_stay_readable_as_repairing_runtimes_do() -> None:
    runtime = RetryingRuntime(scripted(ScriptedSuccess()), attempts=4, max_wait_s=3.0, deadline_s=9)
    assert (runtime.attempts, runtime.max_wait_s, runtime.deadline_s) == (4, 3.0, 9)


def test_wrapper_passes_the_conformance_kit(request_: ExecutionRequest) -> None:
    failing = RetryingRuntime(
        scripted(ScriptedFailure(CODE.UNAVAILABLE, "down")), attempts=2, sleep=lambda s: None
    )
    check_adapter(
        RetryingRuntime(scripted(ScriptedSuccess())),
        request_,
        failing_request=request_,
        failing_adapter=failing,
    )
