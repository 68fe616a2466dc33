"""The conformance kit's base checks (SPEC §3, §8.3); public via ``templiqx_core.conformance``."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

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
    "CONFORMANCE_CHECKS",
    "ConformanceError",
    "ConformanceReport",
    "check_adapter",
    "check_concurrent_use",
    "check_failure_projection",
    "check_sink_exception_propagates",
    "check_streaming_parity",
    "receipts_equal",
    "run_check",
    "validate_event_order",
]


class ConformanceError(AssertionError):
    """An adapter broke one of the port's invariants."""


class _SinkCancelled(Exception):
    """Raised by the kit's sink to prove sink exceptions propagate unchanged."""


@dataclass
class ConformanceReport:
    adapter_id: str
    passed: list[str] = field(default_factory=list)


def validate_event_order(events: Sequence[StreamEvent]) -> StreamEvent:
    """Exactly one terminal event, last, preceded only by deltas. Returns the terminal."""
    if not events:
        raise ConformanceError("stream emitted no events; exactly one terminal event is required")
    terminals = [i for i, e in enumerate(events) if isinstance(e, (CompleteEvent, FailedEvent))]
    if len(terminals) != 1:
        raise ConformanceError(f"stream emitted {len(terminals)} terminal events, expected 1")
    if terminals[0] != len(events) - 1:
        raise ConformanceError(
            f"terminal event at position {terminals[0]} is not last of {len(events)}"
        )
    for event in events[:-1]:
        if not isinstance(event, (DeltaEvent, ToolCallDeltaEvent)):
            raise ConformanceError(f"unexpected {type(event).__name__} before the terminal event")
    return events[-1]


def receipts_equal(left: ExecutionReceipt, right: ExecutionReceipt) -> bool:
    """Receipts agree on every field the port promises to keep stable."""
    return left.to_json() == right.to_json()


def check_streaming_parity(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """``Complete`` carries the receipt ``execute`` returns, and so does the return value."""
    direct = adapter.execute(request)
    events: list[StreamEvent] = []
    streamed = adapter.execute_streaming(request, events.append)
    terminal = validate_event_order(events)
    if not isinstance(terminal, CompleteEvent):
        raise ConformanceError(f"successful stream ended with {type(terminal).__name__}")
    if not receipts_equal(terminal.receipt, direct):
        raise ConformanceError("Complete event's receipt differs from execute()'s receipt")
    if not receipts_equal(streamed, direct):
        raise ConformanceError("execute_streaming() returned a receipt that differs from execute()")


def check_failure_projection(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """A failing request emits one ``Failed{code}`` last and raises the ``PortError``."""
    events: list[StreamEvent] = []
    try:
        adapter.execute_streaming(request, events.append)
    except PortError as error:
        terminal = validate_event_order(events)
        if not isinstance(terminal, FailedEvent):
            raise ConformanceError(f"failed stream ended with {type(terminal).__name__}") from None
        if terminal.code != error.code:
            raise ConformanceError(
                f"Failed event code {terminal.code} differs from raised {error.code}"
            ) from None
        if not terminal.code.startswith("TQX_"):
            raise ConformanceError(
                f"Failed event code {terminal.code} is not a TQX_* code"
            ) from None
        return
    raise ConformanceError("execute_streaming() on the failing request did not raise a PortError")


def check_sink_exception_propagates(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """An exception raised by the sink reaches the caller unchanged (host cancellation)."""
    sentinel = _SinkCancelled("cancelled by the conformance kit")

    def sink(event: StreamEvent) -> None:
        raise sentinel

    try:
        adapter.execute_streaming(request, sink)
    except _SinkCancelled as raised:
        if raised is not sentinel:
            raise ConformanceError("sink exception was replaced by another instance") from None
        return
    except BaseException as other:
        raise ConformanceError(
            f"sink exception was swallowed or replaced by {type(other).__name__}"
        ) from None
    raise ConformanceError("sink raised, but execute_streaming() returned normally")


def check_concurrent_use(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, threads: int = 8, calls: int = 10
) -> None:
    """One instance serves ``threads`` concurrent callers, each getting the same receipt."""
    expected = adapter.execute(request)
    barrier = threading.Barrier(threads)

    def worker(_: int) -> list[ExecutionReceipt]:
        barrier.wait(timeout=30)
        return [adapter.execute(request) for _ in range(calls)]

    with ThreadPoolExecutor(max_workers=threads) as pool:
        results = [receipt for batch in pool.map(worker, range(threads)) for receipt in batch]
    mismatched = sum(not receipts_equal(receipt, expected) for receipt in results)
    if mismatched:
        raise ConformanceError(f"{mismatched} of {len(results)} concurrent receipts differed")


CONFORMANCE_CHECKS: dict[str, Callable[..., None]] = {
    "streaming_parity": check_streaming_parity,
    "sink_exception_propagates": check_sink_exception_propagates,
    "concurrent_use": check_concurrent_use,
    "failure_projection": check_failure_projection,
}


def run_check(
    name: str,
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    failing_request: ExecutionRequest | None = None,
    failing_adapter: RuntimeAdapter | None = None,
    **options: Any,
) -> None:
    """Run one named check; ``failure_projection`` uses the failing adapter/request."""
    if name not in CONFORMANCE_CHECKS:
        raise KeyError(f"unknown conformance check {name!r}")
    if name == "failure_projection":
        if failing_request is None:
            raise ConformanceError("failure_projection needs a failing_request")
        check_failure_projection(failing_adapter or adapter, failing_request)
    else:
        CONFORMANCE_CHECKS[name](adapter, request, **options)


def check_adapter(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    failing_request: ExecutionRequest | None = None,
    failing_adapter: RuntimeAdapter | None = None,
    threads: int = 8,
    calls: int = 10,
) -> ConformanceReport:
    """Run every check; failure projection only when a failing request is given."""
    report = ConformanceReport(adapter_id=adapter.descriptor().id)
    for name in CONFORMANCE_CHECKS:
        if name == "failure_projection" and failing_request is None:
            continue
        options = {"threads": threads, "calls": calls} if name == "concurrent_use" else {}
        run_check(
            name,
            adapter,
            request,
            failing_request=failing_request,
            failing_adapter=failing_adapter,
            **options,
        )
        report.passed.append(name)
    return report
