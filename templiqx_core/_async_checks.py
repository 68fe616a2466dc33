"""The conformance kit's checks of the async path (``aexecute``, ``aexecute_streaming``).

An async host awaits the same receipts a sync host gets: these checks hold an adapter to
that, each on an event loop of its own (``asyncio.run``), so they run from sync tests.
Native adapters (``aproduce_output``) and thread-backed ones pass the same checks.
``asyncio`` is imported inside each check: a sync host's start-up never pays for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ._conformance import ConformanceError, ConformanceReport, receipts_equal, validate_event_order
from ._contracts import (
    CompleteEvent,
    DeltaEvent,
    ExecutionRequest,
    FailedEvent,
    StreamEvent,
    ToolCallDeltaEvent,
)
from ._errors import PortError
from ._ports import RuntimeAdapter

__all__ = [
    "ASYNC_CHECKS",
    "check_async_adapter",
    "check_async_cancellation",
    "check_async_concurrent_use",
    "check_async_failure_projection",
    "check_async_parity",
]


def check_async_parity(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """``aexecute`` and ``aexecute_streaming`` give the receipt ``execute`` gives; the
    stream ends with exactly one terminal event, ``Complete``, carrying it."""
    import asyncio

    direct = adapter.execute(request)

    async def run() -> None:
        awaited = await adapter.aexecute(request)
        if not receipts_equal(awaited, direct):
            raise ConformanceError("aexecute() returned a receipt that differs from execute()")
        events: list[StreamEvent] = []
        streamed = await adapter.aexecute_streaming(request, events.append)
        terminal = validate_event_order(events)
        if not isinstance(terminal, CompleteEvent):
            raise ConformanceError(f"successful async stream ended with {type(terminal).__name__}")
        if not (receipts_equal(terminal.receipt, direct) and receipts_equal(streamed, direct)):
            raise ConformanceError("aexecute_streaming()'s receipt differs from execute()'s")

    asyncio.run(run())


def check_async_failure_projection(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """A failing request awaited: one ``Failed{code}`` last, then the same ``PortError``."""
    import asyncio

    async def run() -> None:
        events: list[StreamEvent] = []
        try:
            await adapter.aexecute_streaming(request, events.append)
        except PortError as error:
            terminal = validate_event_order(events)
            if not isinstance(terminal, FailedEvent) or terminal.code != error.code:
                raise ConformanceError(
                    f"async stream ended with {terminal!r}, not Failed({error.code})"
                ) from None
            try:
                await adapter.aexecute(request)
            except PortError as again:
                if again.code != error.code:
                    raise ConformanceError(
                        f"aexecute() raised {again.code}, aexecute_streaming() {error.code}"
                    ) from None
                return
            raise ConformanceError("aexecute() on the failing request returned") from None
        raise ConformanceError("aexecute_streaming() on the failing request did not raise")

    asyncio.run(run())


def check_async_concurrent_use(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, tasks: int = 50
) -> None:
    """One instance serves ``tasks`` concurrent tasks on one loop, each the same receipt."""
    import asyncio

    expected = adapter.execute(request)

    async def run() -> list[Any]:
        return await asyncio.gather(*(adapter.aexecute(request) for _ in range(tasks)))

    mismatched = sum(not receipts_equal(r, expected) for r in asyncio.run(run()))
    if mismatched:
        raise ConformanceError(f"{mismatched} of {tasks} concurrent async receipts differed")


def check_async_cancellation(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    connection_released: Callable[[], bool],
    cancel_after_s: float | None = None,
    within_s: float = 2.0,
) -> None:
    """Cancelling the awaiting task ends the call promptly, with no event after it, and
    releases the connection.

    ``request`` must take longer than ``within_s`` (a slow stream, or an upstream that
    hangs). The task is cancelled at its first delta, or ``cancel_after_s`` after it
    started when given (adapters that emit no deltas); it must end raising
    ``CancelledError`` within ``within_s``, emit nothing more (no ``Complete``, no
    ``Failed``), and ``connection_released()`` (the host's probe) must turn true.
    """
    import asyncio

    async def run() -> tuple[float, float, list[StreamEvent], int]:
        events: list[StreamEvent] = []
        first_delta = asyncio.Event()
        loop = asyncio.get_running_loop()

        def sink(event: StreamEvent) -> None:
            events.append(event)
            if isinstance(event, (DeltaEvent, ToolCallDeltaEvent)):
                # Thread-safe: a thread-backed adapter calls the sink from its worker.
                loop.call_soon_threadsafe(first_delta.set)

        task = asyncio.create_task(adapter.aexecute_streaming(request, sink))
        try:
            if cancel_after_s is None:
                await asyncio.wait_for(first_delta.wait(), timeout=30)
            else:
                await asyncio.sleep(cancel_after_s)
        except TimeoutError:
            task.cancel()
            raise ConformanceError("the stream to cancel sent no delta within 30 s") from None
        if task.done():
            raise ConformanceError("the call to cancel ended before it was cancelled")
        seen = len(events)
        cancelled_at = time.monotonic()
        task.cancel()
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=within_s + 5)
        except asyncio.CancelledError:
            pass
        except TimeoutError:
            raise ConformanceError(
                f"the cancelled call did not end within {within_s:g} s"
            ) from None
        except BaseException as other:
            raise ConformanceError(
                f"a cancelled call raised {type(other).__name__}, not CancelledError"
            ) from None
        else:
            raise ConformanceError("cancelled, but aexecute_streaming() returned normally")
        return cancelled_at, time.monotonic(), events, seen

    cancelled_at, ended, events, seen = asyncio.run(run())
    if ended - cancelled_at > within_s:
        raise ConformanceError(
            f"the call went on for {ended - cancelled_at:.2f} s after the cancel "
            f"(allowed {within_s:g} s)"
        )
    if len(events) > seen:
        late = type(events[seen]).__name__
        raise ConformanceError(f"a cancelled stream emitted {late} after the cancel")
    while not connection_released():
        if time.monotonic() - ended > within_s:
            raise ConformanceError(f"the connection was not released within {within_s:g} s")
        time.sleep(0.01)


ASYNC_CHECKS: dict[str, Callable[..., None]] = {
    "async_parity": check_async_parity,
    "async_failure_projection": check_async_failure_projection,
    "async_concurrent_use": check_async_concurrent_use,
    "async_cancellation": check_async_cancellation,
}


def check_async_adapter(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    failing_request: ExecutionRequest | None = None,
    cancel_request: ExecutionRequest | None = None,
    connection_released: Callable[[], bool] | None = None,
    cancel_after_s: float | None = None,
    tasks: int = 50,
) -> ConformanceReport:
    """Run every async check for which the host supplied what it needs."""

    report = ConformanceReport(adapter_id=adapter.descriptor().id)
    check_async_parity(adapter, request)
    report.passed.append("async_parity")
    check_async_concurrent_use(adapter, request, tasks=tasks)
    report.passed.append("async_concurrent_use")
    if failing_request is not None:
        check_async_failure_projection(adapter, failing_request)
        report.passed.append("async_failure_projection")
    if cancel_request is not None and connection_released is not None:
        check_async_cancellation(
            adapter,
            cancel_request,
            connection_released=connection_released,
            cancel_after_s=cancel_after_s,
        )
        report.passed.append("async_cancellation")
    return report
