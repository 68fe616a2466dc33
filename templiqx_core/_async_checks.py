"""The conformance kit's checks of the async path (``aexecute``, ``aexecute_streaming``).

An async host awaits the same receipts a sync host gets: these checks hold an adapter to
that, each on an event loop of its own, run on a helper thread with a bounded wait (an
adapter whose task ignores cancellation fails the check instead of hanging it), so they
run from sync tests. Native adapters (``aproduce_output``) and thread-backed ones pass the
same checks. ``asyncio`` is imported inside each check: a sync host's start-up never
pays for it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

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

_T = TypeVar("_T")

__all__ = [
    "ASYNC_CHECKS",
    "check_async_adapter",
    "check_async_cancellation",
    "check_async_concurrent_use",
    "check_async_failure_projection",
    "check_async_parity",
]


def _run(main: Callable[[], Coroutine[Any, Any, _T]], *, limit_s: float, what: str) -> _T:
    """``asyncio.run(main())`` on a daemon thread, waited for at most ``limit_s``."""
    import asyncio

    outcome: list[Any] = []

    def target() -> None:
        try:
            outcome.append((True, asyncio.run(main())))
        except BaseException as error:  # handed to the caller's thread
            outcome.append((False, error))

    worker = threading.Thread(target=target, name="templiqx-async-check", daemon=True)
    worker.start()
    worker.join(limit_s)
    if worker.is_alive():
        raise ConformanceError(
            f"{what} did not end within {limit_s:g} s (a task that ignores cancellation, "
            "or a call that never returns)"
        )
    ok, value = outcome[0]
    if not ok:
        raise value
    return value  # type: ignore[no-any-return]


def _distinct(request: ExecutionRequest, index: int) -> ExecutionRequest:
    """``request`` with its last message marked ``#index``: each task asks its own thing,
    so an adapter answering one task with another's request is seen."""
    interaction = request.interaction
    if not interaction.messages:
        return request
    *head, last = interaction.messages
    marked = last.model_copy(update={"content": f"{last.content} #{index}"})
    return request.model_copy(
        update={"interaction": interaction.model_copy(update={"messages": [*head, marked]})}
    )


def check_async_parity(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """``aexecute`` and ``aexecute_streaming`` give the receipt ``execute`` gives; the
    stream ends with exactly one terminal event, ``Complete``, carrying it."""

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

    _run(run, limit_s=120, what="async parity")


def check_async_failure_projection(adapter: RuntimeAdapter, request: ExecutionRequest) -> None:
    """A failing request awaited: one ``Failed{code}`` last, then the same ``PortError``."""

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

    _run(run, limit_s=120, what="async failure projection")


def check_async_concurrent_use(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    tasks: int = 50,
    max_stall_s: float = 0.25,
) -> None:
    """``tasks`` concurrent tasks on one loop, each asking its own thing (``request`` with a
    marked last message), each get the receipt ``execute`` gives for it; and no call
    holds the loop ``max_stall_s`` or longer (a blocking call inside ``aproduce_output``).
    """
    import asyncio

    requests = [_distinct(request, i) for i in range(tasks)]
    expected = [adapter.execute(r) for r in requests]

    async def run() -> tuple[list[Any], float]:
        stalls: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                started = time.monotonic()
                await asyncio.sleep(0.005)
                stalls.append(time.monotonic() - started - 0.005)

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        receipts = await asyncio.gather(*(adapter.aexecute(r) for r in requests))
        done.set()
        await tick
        return receipts, max(stalls, default=0.0)

    receipts, stall = _run(run, limit_s=120, what="async concurrent use")
    mismatched = sum(not receipts_equal(r, e) for r, e in zip(receipts, expected, strict=True))
    if mismatched:
        raise ConformanceError(
            f"{mismatched} of {tasks} concurrent async receipts differ from execute()'s "
            "for the same request (cross-talk between tasks?)"
        )
    if stall >= max_stall_s:
        raise ConformanceError(
            f"the event loop was held for {stall:.2f} s during concurrent calls "
            f"(allowed {max_stall_s:g} s): a blocking call on the loop?"
        )


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
            await asyncio.wait_for(asyncio.shield(task), timeout=within_s + 2)
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

    cancelled_at, ended, events, seen = _run(
        run, limit_s=2 * within_s + 5, what="the cancelled call"
    )
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
