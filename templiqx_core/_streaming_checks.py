"""Conformance checks for adapters that really stream (ADR R12), re-exported by ``conformance``.

What a host adapter that overrides ``execute_streaming`` must prove beyond the port's
default projection: deltas in order, tool-call fragments that reassemble into exactly
the calls the provider sent, one terminal event, failure mid-stream, cancellation,
the response-size bound, and parity with ``execute``. Each check is callable on its own
and raises ``ConformanceError`` naming what broke. Checks that need the provider's side
of the story (what text it sent, whether the connection was closed) take it as
arguments: the host knows its test server, the kit does not.

How ``ToolCallDelta`` events reassemble (the wire contract has no call index): an event
with a non-empty ``name`` opens the next call, an event with an empty ``name`` continues
the call opened last. So the first event of a call carries its name and the fragments
of one call are contiguous, as in the providers' own framing. A provider may interleave
parallel calls (index 0, 1, 0, or several indices in one chunk); an adapter that
forwards fragments as they arrive breaks the rule there and passes on sequential
streams, so a host should also give the kit an interleaved stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from . import codes
from ._canonical import fingerprint
from ._conformance import (
    ConformanceError,
    ConformanceReport,
    check_streaming_parity,
    receipts_equal,
    validate_event_order,
)
from ._contracts import (
    CompleteEvent,
    DeltaEvent,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    StreamEvent,
    ToolCallDeltaEvent,
)
from ._errors import PortError
from ._ports import RuntimeAdapter

__all__ = [
    "STREAMING_CHECKS",
    "AssembledToolCall",
    "StreamRun",
    "assemble_tool_calls",
    "check_cancellation",
    "check_delta_order",
    "check_midstream_failure",
    "check_single_terminal",
    "check_size_bound",
    "check_streaming_adapter",
    "check_tool_call_assembly",
    "run_stream",
]

INVALID_RESPONSE = codes.RUNTIME_INVALID_RESPONSE


class _Cancelled(Exception):
    """Raised by the kit's sink to cancel a stream."""


@dataclass(frozen=True)
class AssembledToolCall:
    name: str
    arguments: str


@dataclass
class StreamRun:
    """One ``execute_streaming`` call as the kit saw it."""

    events: list[StreamEvent] = field(default_factory=list)
    receipt: ExecutionReceipt | None = None
    error: PortError | None = None

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.events if isinstance(e, DeltaEvent))

    @property
    def deltas(self) -> list[DeltaEvent | ToolCallDeltaEvent]:
        return [e for e in self.events if isinstance(e, (DeltaEvent, ToolCallDeltaEvent))]


def run_stream(adapter: RuntimeAdapter, request: ExecutionRequest) -> StreamRun:
    """Stream ``request``; a ``PortError`` is recorded, checked against the events, kept."""
    run = StreamRun()
    try:
        run.receipt = adapter.execute_streaming(request, run.events.append)
    except PortError as error:
        run.error = error
    terminal = validate_event_order(run.events)
    if run.error is not None:
        if not isinstance(terminal, FailedEvent):
            raise ConformanceError(f"failed stream ended with {type(terminal).__name__}")
        if terminal.code != run.error.code:
            raise ConformanceError(
                f"Failed event code {terminal.code} differs from raised {run.error.code}"
            )
        if not terminal.code.startswith("TQX_"):
            raise ConformanceError(f"Failed event code {terminal.code} is not a TQX_* code")
    elif not isinstance(terminal, CompleteEvent):
        raise ConformanceError(f"stream returned normally but ended with {type(terminal).__name__}")
    elif run.receipt is None or not receipts_equal(terminal.receipt, run.receipt):
        raise ConformanceError("Complete event's receipt differs from the returned receipt")
    return run


def assemble_tool_calls(events: Sequence[StreamEvent]) -> list[AssembledToolCall]:
    """Put ``ToolCallDelta`` fragments back together (rule in the module docstring)."""
    calls: list[tuple[str, list[str]]] = []
    for event in events:
        if not isinstance(event, ToolCallDeltaEvent):
            continue
        if event.name:
            calls.append((event.name, [event.arguments_fragment]))
        elif not calls:
            raise ConformanceError("a nameless ToolCallDelta came before any call was opened")
        else:
            calls[-1][1].append(event.arguments_fragment)
    return [AssembledToolCall(name, "".join(parts)) for name, parts in calls]


def check_delta_order(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, expected_text: str | None = None
) -> None:
    """Deltas arrive in order: their text is what the provider sent (``expected_text``)
    and, when the stream completes, it is the JSON text of the receipt's output."""
    run = run_stream(adapter, request)
    text = run.text
    if expected_text is not None and text != expected_text:
        raise ConformanceError(
            f"Delta texts concatenate to {_preview(text)}, the provider sent "
            f"{_preview(expected_text)}"
        )
    if run.receipt is not None:
        try:
            parsed = orjson.loads(text)
        except orjson.JSONDecodeError:
            raise ConformanceError(
                f"Delta texts concatenate to {_preview(text)}: not the output's JSON text"
            ) from None
        if fingerprint(parsed) != run.receipt.output_fingerprint:
            raise ConformanceError("Delta texts concatenate to JSON that is not the output")


def check_tool_call_assembly(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    expected: Sequence[tuple[str, str]],
) -> None:
    """``ToolCallDelta`` fragments reassemble into exactly the provider's calls:
    ``expected`` lists ``(name, arguments)`` per call, in the provider's index order.

    Run it on a stream whose calls' fragments interleave too (``check_streaming_adapter``'s
    ``interleaved_tool_calls``): that is where a forwarding adapter's calls run together."""
    run = run_stream(adapter, request)
    got = [(c.name, c.arguments) for c in assemble_tool_calls(run.events)]
    want = [(name, arguments) for name, arguments in expected]
    if len(got) != len(want):
        raise ConformanceError(
            f"ToolCallDelta events assemble into {len(got)} calls, not {len(want)}"
        )
    for position, (have, need) in enumerate(zip(got, want, strict=True)):
        if have != need:
            raise ConformanceError(
                f"tool call {position} assembles to {have[0]}({_preview(have[1])}), "
                f"the provider sent {need[0]}({_preview(need[1])})"
            )


def check_single_terminal(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """Success or failure, the stream ends with exactly one terminal event, last, and it
    agrees with the outcome (``Complete`` and a return, or ``Failed`` and the raise)."""
    run_stream(adapter, request)


def check_midstream_failure(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    expected_text: str | None = None,
    expected_code: str | None = None,
    min_deltas: int = 1,
) -> None:
    """A stream that breaks after some deltas emits those deltas (``expected_text`` when
    given), then one ``Failed`` with a ``TQX_*`` code, then raises the same error."""
    run = run_stream(adapter, request)
    if run.error is None:
        raise ConformanceError(
            "execute_streaming() on the failing stream did not raise a PortError"
        )
    if expected_code is not None and run.error.code != expected_code:
        raise ConformanceError(
            f"mid-stream failure raised {run.error.code}, expected {expected_code}"
        )
    if len(run.deltas) < min_deltas:
        raise ConformanceError(
            f"{len(run.deltas)} deltas before Failed: the deltas received before the failure "
            "were not emitted"
        )
    if expected_text is not None and run.text != expected_text:
        raise ConformanceError(
            f"deltas before Failed were {_preview(run.text)}, the provider sent "
            f"{_preview(expected_text)}"
        )


def check_cancellation(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    connection_released: Callable[[], bool],
    cancel: Callable[[], None] | None = None,
    within_s: float = 2.0,
) -> None:
    """Cancelling stops reading promptly and releases the connection.

    ``request`` must stream slowly (longer than ``within_s``). Without ``cancel`` the sink
    raises at the first delta and that exception must propagate unchanged; with it,
    ``cancel()`` is called from another thread after the first delta (say, a signal
    that raises ``KeyboardInterrupt`` in the calling thread) and the call must end by
    raising. Either way it must end within ``within_s`` and ``connection_released()``
    (the host's probe, e.g. its test server saw the socket close) must turn true.
    """
    first_delta = threading.Event()
    sentinel = _Cancelled("cancelled by the conformance kit")
    events: list[StreamEvent] = []
    cancelled_at: list[float] = []

    def sink(event: StreamEvent) -> None:
        events.append(event)
        if isinstance(event, (DeltaEvent, ToolCallDeltaEvent)) and not first_delta.is_set():
            first_delta.set()
            if cancel is None:
                cancelled_at.append(time.monotonic())
                raise sentinel

    def signal_cancel() -> None:
        if first_delta.wait(timeout=30) and cancel is not None and not finished.is_set():
            cancelled_at.append(time.monotonic())
            cancel()

    finished = threading.Event()
    helper = threading.Thread(target=signal_cancel, daemon=True) if cancel else None
    if helper is not None:
        helper.start()
    raised: BaseException | None = None
    try:
        adapter.execute_streaming(request, sink)
    except BaseException as error:
        raised = error
    ended = time.monotonic()
    finished.set()
    first_delta.set()
    if helper is not None:
        helper.join(timeout=5)
    if not cancelled_at:
        raise ConformanceError("the stream to cancel ended before its first delta")
    if raised is None:
        raise ConformanceError("cancelled, but execute_streaming() returned normally")
    if cancel is None and raised is not sentinel:
        raise ConformanceError(f"the sink's exception was replaced by {type(raised).__name__}")
    if ended - cancelled_at[0] > within_s:
        raise ConformanceError(
            f"reading went on for {ended - cancelled_at[0]:.2f} s after the cancel "
            f"(allowed {within_s:g} s)"
        )
    if any(isinstance(e, CompleteEvent) for e in events):
        raise ConformanceError("a cancelled stream emitted Complete")
    _wait_for(connection_released, ended, within_s, "the connection was not released")


def check_size_bound(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    max_bytes: int,
    bytes_sent: Callable[[], int] | None = None,
) -> None:
    """A stream longer than the adapter's ``max_bytes`` fails ``TQX_RUNTIME_INVALID_RESPONSE``
    (``Failed``, then the raise) without reading it all: no more delta text than the bound,
    and, with the host's ``bytes_sent`` probe, not the whole stream."""
    run = run_stream(adapter, request)
    if run.error is None or run.error.code != INVALID_RESPONSE:
        got = "a receipt" if run.error is None else run.error.code
        raise ConformanceError(f"an oversized stream gave {got}, not {INVALID_RESPONSE}")
    emitted = sum(len(e.text.encode()) for e in run.deltas if isinstance(e, DeltaEvent))
    emitted += sum(
        len(e.arguments_fragment.encode()) for e in run.deltas if isinstance(e, ToolCallDeltaEvent)
    )
    if emitted > max_bytes:
        raise ConformanceError(f"{emitted} bytes of deltas emitted past a {max_bytes}-byte bound")
    if bytes_sent is not None:
        sent = bytes_sent()
        if sent > 4 * max_bytes + 1024 * 1024:
            raise ConformanceError(f"the adapter kept reading: {sent} bytes sent for {max_bytes}")


STREAMING_CHECKS: dict[str, Callable[..., None]] = {
    "delta_order": check_delta_order,
    "tool_call_assembly": check_tool_call_assembly,
    "single_terminal": check_single_terminal,
    "midstream_failure": check_midstream_failure,
    "cancellation": check_cancellation,
    "size_bound": check_size_bound,
    "streaming_parity": check_streaming_parity,
}


def check_streaming_adapter(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    expected_text: str | None = None,
    expected_tool_calls: Sequence[tuple[str, str]] | None = None,
    midstream_failure: ExecutionRequest | None = None,
    cancel_request: ExecutionRequest | None = None,
    connection_released: Callable[[], bool] | None = None,
    oversized_request: ExecutionRequest | None = None,
    max_bytes: int | None = None,
    interleaved_tool_calls: tuple[ExecutionRequest, Sequence[tuple[str, str]]] | None = None,
) -> ConformanceReport:
    """Run every streaming check for which the host supplied what it needs.

    ``interleaved_tool_calls`` is a request whose stream interleaves the fragments of
    parallel tool calls, with the ``(name, arguments)`` the provider sent, by index."""
    report = ConformanceReport(adapter_id=adapter.descriptor().id)
    check_delta_order(adapter, request, expected_text=expected_text)
    report.passed.append("delta_order")
    check_single_terminal(adapter, request)
    report.passed.append("single_terminal")
    check_streaming_parity(adapter, request)
    report.passed.append("streaming_parity")
    if expected_tool_calls is not None:
        check_tool_call_assembly(adapter, request, expected=expected_tool_calls)
        report.passed.append("tool_call_assembly")
    if interleaved_tool_calls is not None:
        interleaved, calls = interleaved_tool_calls
        check_tool_call_assembly(adapter, interleaved, expected=calls)
        report.passed.append("tool_call_interleaving")
    if midstream_failure is not None:
        check_midstream_failure(adapter, midstream_failure)
        report.passed.append("midstream_failure")
    if cancel_request is not None and connection_released is not None:
        check_cancellation(adapter, cancel_request, connection_released=connection_released)
        report.passed.append("cancellation")
    if oversized_request is not None and max_bytes is not None:
        check_size_bound(adapter, oversized_request, max_bytes=max_bytes)
        report.passed.append("size_bound")
    return report


def _wait_for(probe: Callable[[], bool], since: float, within_s: float, message: str) -> None:
    while not probe():
        if time.monotonic() - since > within_s:
            raise ConformanceError(f"{message} within {within_s:g} s")
        time.sleep(0.01)


def _preview(text: Any, limit: int = 60) -> str:
    value = repr(text)
    return value if len(value) <= limit else value[: limit - 3] + "..."
