"""The port owns the receipt, the failure projection and the lifecycle (SPEC §3)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest

from templiqx_core import (
    AdapterDescriptor,
    CompleteEvent,
    DeltaEvent,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    PortError,
    RuntimeAdapter,
    RuntimeFailureError,
    ScriptedRuntime,
    ScriptedSuccess,
    StreamEvent,
    codes,
)
from templiqx_core._ports import CallOutcome, Produced, RuntimeCall, WrappingRuntime
from templiqx_core.adapters import build_receipt
from templiqx_core.conformance import check_adapter, validate_event_order
from tests.conftest import assert_closed, start_call

DESCRIPTOR = AdapterDescriptor(id="misbehaving", version="0", capabilities=["structured_output"])


def nested(depth: int) -> Any:
    value: Any = []
    for _ in range(depth - 1):
        value = [value]
    return value


class Misbehaving(RuntimeAdapter):
    """Implements only the hook; ``behave`` decides what producing the output does."""

    def __init__(self, behave: Callable[[RuntimeCall], Any]) -> None:
        self.behave = behave
        self.outcomes: list[CallOutcome] = []
        self.released = 0

    def descriptor(self) -> AdapterDescriptor:
        return DESCRIPTOR

    def produce_output(self, call: RuntimeCall) -> Any:
        call.on_finish(self.outcomes.append)
        return self.behave(call)

    def release(self) -> None:
        self.released += 1


class RustShaped(RuntimeAdapter):
    """Only ``descriptor`` and ``execute``: the shape every SPEC §3 host adapter has."""

    def __init__(self, execute: Callable[[ExecutionRequest], ExecutionReceipt]) -> None:
        self._execute = execute

    def descriptor(self) -> AdapterDescriptor:
        return DESCRIPTOR

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        return self._execute(request)


def raise_(error: BaseException) -> Callable[..., Any]:
    def run(*_: Any) -> Any:
        raise error

    return run


def stream(adapter: RuntimeAdapter, request: ExecutionRequest) -> tuple[list[StreamEvent], Any]:
    events: list[StreamEvent] = []
    try:
        return events, adapter.execute_streaming(request, events.append)
    except BaseException as error:
        return events, error


def deltas_then(result: Callable[[RuntimeCall], Any]) -> Callable[[RuntimeCall], Any]:
    def run(call: RuntimeCall) -> Any:
        call.emit(DeltaEvent(text="{"))
        return result(call)

    return run


OUTCOMES: dict[str, tuple[Callable[[RuntimeCall], Any], str | None]] = {
    "success": (lambda call: {"x": 1}, None),
    "produced": (lambda call: Produced({"x": 1}, details="usage"), None),
    "port error": (raise_(PortError("named")), codes.PORT),
    "value error": (raise_(ValueError("secret-ish text")), codes.RUNTIME_PERMANENT),
    "recursion": (raise_(RecursionError()), codes.RUNTIME_PERMANENT),
    "not json": (lambda call: object(), codes.RUNTIME_INVALID_RESPONSE),
    "nan": (lambda call: float("nan"), codes.RUNTIME_INVALID_RESPONSE),
    "1000 deep": (lambda call: nested(1000), codes.RUNTIME_INVALID_RESPONSE),
    "lone surrogate": (lambda call: {"k": "\ud800"}, codes.RUNTIME_INVALID_RESPONSE),
    "emits a terminal": (
        lambda call: call.emit(FailedEvent(code="X", message="y")),  # type: ignore[arg-type]
        codes.RUNTIME_PERMANENT,
    ),
    "delta then value error": (deltas_then(raise_(ValueError())), codes.RUNTIME_PERMANENT),
    "delta then success": (deltas_then(lambda call: {"x": 1}), None),
    "keyboard interrupt": (raise_(KeyboardInterrupt()), codes.RUNTIME_INTERRUPTED),
    "system exit": (raise_(SystemExit(3)), codes.RUNTIME_INTERRUPTED),
}


@pytest.mark.parametrize("name", sorted(OUTCOMES))
def test_every_outcome_ends_a_stream_with_exactly_one_terminal_event(
    name: str, bli61_request: ExecutionRequest
) -> None:
    behave, code = OUTCOMES[name]
    adapter = Misbehaving(behave)
    events, result = stream(adapter, bli61_request)
    terminal = validate_event_order(events)
    assert len(adapter.outcomes) == 1  # observers hear about it exactly once
    outcome = adapter.outcomes[0]
    if code is None:
        assert isinstance(terminal, CompleteEvent)
        assert isinstance(result, ExecutionReceipt)
        assert terminal.receipt == result == adapter.execute(bli61_request)
        assert outcome.receipt == result
        return
    assert isinstance(terminal, FailedEvent)
    assert terminal.code == code == outcome.code
    assert isinstance(result, BaseException)
    if isinstance(result, Exception):
        assert isinstance(result, PortError)
        assert result.code == code
    assert "secret-ish" not in terminal.message + outcome.detail


@pytest.mark.parametrize("name", ["value error", "1000 deep", "not json", "port error"])
def test_execute_maps_every_exception_to_a_port_error(
    name: str, bli61_request: ExecutionRequest
) -> None:
    behave, code = OUTCOMES[name]
    with pytest.raises(PortError) as raised:
        Misbehaving(behave).execute(bli61_request)
    assert raised.value.code == code


def test_a_non_exception_is_re_raised_as_is_after_failed(bli61_request: ExecutionRequest) -> None:
    interrupt = KeyboardInterrupt()
    events: list[StreamEvent] = []
    with pytest.raises(KeyboardInterrupt) as raised:
        Misbehaving(raise_(interrupt)).execute_streaming(bli61_request, events.append)
    assert raised.value is interrupt
    assert [e.kind for e in events] == ["Failed"]


def test_a_sink_exception_propagates_unchanged_and_ends_the_stream(
    bli61_request: ExecutionRequest,
) -> None:
    class Cancel(Exception):
        pass

    adapter = Misbehaving(deltas_then(lambda call: {"x": 1}))
    seen: list[StreamEvent] = []

    def sink(event: StreamEvent) -> None:
        seen.append(event)
        raise Cancel

    with pytest.raises(Cancel):
        adapter.execute_streaming(bli61_request, sink)
    assert [e.kind for e in seen] == ["Delta"]  # no terminal after the host cancelled
    assert [o.code for o in adapter.outcomes] == [codes.RUNTIME_INTERRUPTED]


def test_an_observer_failure_never_changes_the_outcome(bli61_request: ExecutionRequest) -> None:
    def behave(call: RuntimeCall) -> Any:
        call.on_finish(raise_(RuntimeError("observer bug")))
        return {"x": 1}

    adapter = Misbehaving(behave)
    assert adapter.execute(bli61_request).output == {"x": 1}
    assert len(adapter.outcomes) == 1


def test_the_receipt_is_the_one_build_receipt_makes(bli61_request: ExecutionRequest) -> None:
    output = bli61_request.fixture_output
    receipt = Misbehaving(lambda call: output).execute(bli61_request)
    assert receipt == build_receipt(DESCRIPTOR, bli61_request.interaction, output)


def test_an_invalid_schema_is_refused_before_the_hook_runs(
    bli61_request: ExecutionRequest,
) -> None:
    interaction = bli61_request.interaction.model_copy(update={"output_schema": {"type": 5}})
    adapter = Misbehaving(raise_(AssertionError("must not run")))
    events, error = stream(adapter, ExecutionRequest(interaction=interaction))
    assert isinstance(error, PortError)
    assert error.code == codes.DATA_INVALID
    assert [e.kind for e in events] == ["Failed"]
    assert adapter.outcomes == []


RUST_SHAPED: dict[str, tuple[Callable[[ExecutionRequest], Any], str | None]] = {
    "success": (lambda request: build_receipt(DESCRIPTOR, request.interaction, {"x": 1}), None),
    "port error": (raise_(PortError("named")), codes.PORT),
    "value error": (raise_(ValueError()), codes.RUNTIME_PERMANENT),
    "keyboard interrupt": (raise_(KeyboardInterrupt()), codes.RUNTIME_INTERRUPTED),
}


@pytest.mark.parametrize("name", sorted(RUST_SHAPED))
def test_an_adapter_with_only_descriptor_and_execute_keeps_the_stream_guarantee(
    name: str, bli61_request: ExecutionRequest
) -> None:
    execute, code = RUST_SHAPED[name]
    events, result = stream(RustShaped(execute), bli61_request)
    terminal = validate_event_order(events)
    if code is None:
        assert isinstance(terminal, CompleteEvent)
        assert terminal.receipt == result
    else:
        assert isinstance(terminal, FailedEvent)
        assert terminal.code == code
        assert isinstance(result, BaseException)  # the adapter's own exception, unchanged


def test_an_adapter_with_neither_hook_nor_execute_fails_its_calls(
    bli61_request: ExecutionRequest,
) -> None:
    class Empty(RuntimeAdapter):
        def descriptor(self) -> AdapterDescriptor:
            return DESCRIPTOR

    with pytest.raises(RuntimeFailureError, match="NotImplementedError"):
        Empty().execute(bli61_request)


def test_hook_adapters_pass_the_conformance_kit(bli61_request: ExecutionRequest) -> None:
    passed = check_adapter(
        Misbehaving(deltas_then(lambda call: call.request.fixture_output)),
        bli61_request,
        failing_request=bli61_request,
        failing_adapter=Misbehaving(deltas_then(raise_(ValueError()))),
        threads=4,
        calls=4,
    )
    assert "failure_projection" in passed


# -- lifecycle ------------------------------------------------------------------------


def test_close_is_idempotent_and_a_closed_runtime_raises_a_port_error(
    bli61_request: ExecutionRequest,
) -> None:
    adapter = Misbehaving(lambda call: {"x": 1})
    with adapter as entered:
        assert entered is adapter
        entered.execute(bli61_request)
    adapter.close()
    assert adapter.released == 1
    assert adapter.closed
    assert_closed(adapter, bli61_request)
    events, error = stream(adapter, bli61_request)
    assert isinstance(error, PortError)
    assert [e.kind for e in events] == ["Failed"]
    assert isinstance(events[0], FailedEvent)
    assert events[0].code == codes.RUNTIME_CLOSED
    with pytest.raises(PortError):
        adapter.__enter__()


def test_closing_while_a_call_is_in_flight_raises_runtime_closed_not_a_raw_error(
    bli61_request: ExecutionRequest,
) -> None:
    in_flight, released = threading.Event(), threading.Event()

    class Pooled(Misbehaving):
        def release(self) -> None:
            released.set()

    def behave(call: RuntimeCall) -> Any:
        in_flight.set()
        assert released.wait(5)
        raise RuntimeError("Cannot send a request, as the client has been closed.")

    adapter = Pooled(behave)
    worker, errors = start_call(lambda: adapter.execute(bli61_request))
    assert in_flight.wait(5)
    adapter.close()  # on this thread, while the call runs on the other
    worker.join(5)
    assert len(errors) == 1
    assert isinstance(errors[0], PortError)
    assert errors[0].code == codes.RUNTIME_CLOSED


def test_a_wrapper_forwards_descriptor_and_lifecycle(bli61_request: ExecutionRequest) -> None:
    inner = Misbehaving(lambda call: {"x": 1})
    wrapper = WrappingRuntime(inner)
    assert wrapper.descriptor() == inner.descriptor()
    assert wrapper.execute(bli61_request) == inner.execute(bli61_request)
    with wrapper:
        pass
    assert inner.released == 1
    assert inner.closed
    assert_closed(wrapper, bli61_request)


# -- async hosts ----------------------------------------------------------------------


def test_aexecute_returns_the_receipt_execute_returns(bli61_request: ExecutionRequest) -> None:
    runtime = ScriptedRuntime([ScriptedSuccess()])
    events: list[StreamEvent] = []

    async def main() -> tuple[ExecutionReceipt, ExecutionReceipt]:
        plain = await runtime.aexecute(bli61_request)
        streamed = await runtime.aexecute_streaming(bli61_request, events.append)
        return plain, streamed

    plain, streamed = asyncio.run(main())
    assert plain == streamed == runtime.execute(bli61_request)
    assert [e.kind for e in events] == ["Complete"]


def test_aexecute_raises_the_same_port_error(bli61_request: ExecutionRequest) -> None:
    adapter = Misbehaving(raise_(ValueError()))
    with pytest.raises(RuntimeFailureError) as raised:
        asyncio.run(adapter.aexecute(bli61_request))
    assert raised.value.code == codes.RUNTIME_PERMANENT


def test_cancelling_aexecute_streaming_stops_the_stream_at_the_next_delta(
    bli61_request: ExecutionRequest,
) -> None:
    started, go_on = threading.Event(), threading.Event()

    def behave(call: RuntimeCall) -> Any:
        call.emit(DeltaEvent(text="a"))
        started.set()
        assert go_on.wait(5)
        call.emit(DeltaEvent(text="b"))  # the host has gone: this raises
        return {"x": 1}

    adapter = Misbehaving(behave)
    events: list[StreamEvent] = []

    async def main() -> None:
        task = asyncio.create_task(adapter.aexecute_streaming(bli61_request, events.append))
        await asyncio.to_thread(started.wait, 5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        go_on.set()

    asyncio.run(main())  # returns once the worker thread has finished
    assert [e.kind for e in events] == ["Delta"]
    assert [o.code for o in adapter.outcomes] == [codes.RUNTIME_INTERRUPTED]


@pytest.mark.parametrize("io", ["sync", "async"])
def test_an_output_validated_past_the_calls_deadline_is_a_timeout(
    io: str, bli61_request: ExecutionRequest
) -> None:
    """Validating the output is part of the call: finished past the deadline the adapter
    declared, the receipt is refused as a timeout, and observers see that outcome."""
    output = ScriptedRuntime([ScriptedSuccess()]).execute(bli61_request).output
    late = Misbehaving(lambda call: Produced(output, deadline_at=time.monotonic() - 0.001))
    in_time = Misbehaving(lambda call: Produced(output, deadline_at=time.monotonic() + 60))
    events: list[StreamEvent] = []

    def run(adapter: Misbehaving) -> ExecutionReceipt:
        if io == "sync":
            return adapter.execute_streaming(bli61_request, events.append)
        return asyncio.run(adapter.aexecute_streaming(bli61_request, events.append))

    assert run(in_time).output == output
    events.clear()
    with pytest.raises(RuntimeFailureError) as raised:
        run(late)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"
    assert "validating the model output" in raised.value.failure.detail
    assert [type(e) for e in events] == [FailedEvent]
    assert [o.code for o in late.outcomes] == ["TQX_RUNTIME_TIMEOUT"]


@pytest.mark.parametrize("lane", ["sync", "async"])
@pytest.mark.parametrize("name", ["success", "value error", "not json", "port error"])
def test_an_observer_raising_a_base_exception_still_ends_the_stream_once(
    name: str, lane: str, bli61_request: ExecutionRequest
) -> None:
    behave, _ = OUTCOMES[name]

    def interrupting(call: RuntimeCall) -> Any:
        call.on_finish(raise_(KeyboardInterrupt()))
        return behave(call)

    adapter = Misbehaving(interrupting)
    events: list[StreamEvent] = []

    def run() -> Any:
        if lane == "sync":
            return adapter.execute_streaming(bli61_request, events.append)
        return asyncio.run(adapter.aexecute_streaming(bli61_request, events.append))

    with pytest.raises(KeyboardInterrupt):
        run()
    terminal = validate_event_order(events)
    assert isinstance(terminal, FailedEvent)
    assert terminal.code == codes.RUNTIME_INTERRUPTED
