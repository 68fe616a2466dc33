"""Checks a host runs on its ``RuntimeAdapter``; each raises ``ConformanceError`` naming the broken
invariant. ``asynchronous=True`` awaits ``aexecute*`` on one event loop instead. A ``ToolCallDelta``
with a ``name`` opens the next call, a nameless one continues the last."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from concurrent.futures import CancelledError as FutureCancelled
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, NamedTuple, TypeVar, cast

import orjson

from . import codes
from ._canonical import fingerprint
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
from ._ports import EventSink, RuntimeAdapter

__all__ = [
    "AssembledToolCall",
    "ConformanceError",
    "StreamRun",
    "assemble_tool_calls",
    "check_adapter",
    "check_cancellation",
    "check_concurrent_use",
    "check_delta_order",
    "check_failure_projection",
    "check_midstream_failure",
    "check_sink_exception_propagates",
    "check_size_bound",
    "check_streaming_parity",
    "check_tool_call_assembly",
    "receipts_equal",
    "run_stream",
    "validate_event_order",
]

_T = TypeVar("_T")
_DELTAS = (DeltaEvent, ToolCallDeltaEvent)


class ConformanceError(AssertionError):
    """An adapter broke one of the port's invariants."""


class _Cancelled(Exception):
    """Raised by the kit's sink (a host cancelling); it must reach the caller unchanged."""


class AssembledToolCall(NamedTuple):
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
        return [e for e in self.events if isinstance(e, _DELTAS)]


class _Lane:
    """How a check calls the adapter: ``execute*`` here, or ``aexecute*`` on one bounded loop."""

    def __init__(self, adapter: RuntimeAdapter, asynchronous: bool) -> None:
        self.adapter = adapter
        self.prefix = "a" if asynchronous else ""
        self.loop: asyncio.AbstractEventLoop | None = None
        if asynchronous:
            self.loop = loop = asyncio.new_event_loop()

            def serve() -> None:
                loop.run_forever()
                loop.close()

            threading.Thread(target=serve, name="templiqx-async-check", daemon=True).start()

    def __enter__(self) -> _Lane:
        return self

    def __exit__(self, failed: object, *exc_info: object) -> None:
        """Cancel what is left and stop the loop, as ``asyncio.run`` ends; a stuck task keeps it."""
        if self.loop is not None:
            with contextlib.suppress(ConformanceError):
                self.wait(_wind_down(), limit_s=1 if failed else 5, what="shutdown")
                self.loop.call_soon_threadsafe(self.loop.stop)

    def wait(self, main: Coroutine[Any, Any, _T], *, limit_s: float = 120, what: str) -> _T:
        loop = cast(asyncio.AbstractEventLoop, self.loop)  # only async lanes wait
        outcome = asyncio.run_coroutine_threadsafe(main, loop)
        if not wait([outcome], timeout=limit_s).done:
            raise ConformanceError(f"{what} did not end within {limit_s:g} s")
        return outcome.result()

    def stream(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        if self.loop is None:
            return self.adapter.execute_streaming(request, sink)
        call = self.adapter.aexecute_streaming(request, sink)
        return self.wait(call, what="aexecute_streaming()")


async def _wind_down() -> None:
    loop, this = asyncio.get_running_loop(), asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not this]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await loop.shutdown_asyncgens()
    await loop.shutdown_default_executor()


def validate_event_order(events: Sequence[StreamEvent]) -> StreamEvent:
    """Exactly one terminal event, last, preceded only by deltas. Returns the terminal."""
    terminals = [i for i, e in enumerate(events) if isinstance(e, (CompleteEvent, FailedEvent))]
    if len(terminals) != 1:
        raise ConformanceError(f"stream emitted {len(terminals)} terminal events, expected 1")
    if terminals[0] != len(events) - 1:  # so every event before it is a delta
        raise ConformanceError(f"terminal event at position {terminals[0]} is not last")
    return events[-1]


def receipts_equal(left: ExecutionReceipt, right: ExecutionReceipt) -> bool:
    """Receipts agree on every field the port promises to keep stable."""
    return left.to_json() == right.to_json()


def _streamed(lane: _Lane, request: ExecutionRequest) -> StreamRun:
    run = StreamRun()
    try:
        run.receipt = lane.stream(request, run.events.append)
    except PortError as error:
        run.error = error
    terminal = validate_event_order(run.events)
    if run.error is not None:
        if not isinstance(terminal, FailedEvent) or terminal.code != run.error.code:
            got = getattr(terminal, "code", type(terminal).__name__)
            raise ConformanceError(
                f"the stream ended with {got}, which differs from raised {run.error.code}"
            )
        if not terminal.code.startswith("TQX_"):
            raise ConformanceError(f"Failed event code {terminal.code} is not a TQX_* code")
    elif not isinstance(terminal, CompleteEvent):
        raise ConformanceError(f"stream returned normally but ended with {type(terminal).__name__}")
    elif run.receipt is None or not receipts_equal(terminal.receipt, run.receipt):
        raise ConformanceError("Complete event's receipt differs from the returned receipt")
    return run


def run_stream(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, asynchronous: bool = False
) -> StreamRun:
    """Stream ``request``: one terminal event, last, agreeing with the return or the raise."""
    with _Lane(adapter, asynchronous) as lane:
        return _streamed(lane, request)


def check_streaming_parity(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, asynchronous: bool = False
) -> None:
    """``Complete`` and the return carry ``execute``'s receipt (and ``aexecute`` gives it)."""
    with _Lane(adapter, asynchronous) as lane:
        direct = adapter.execute(request)
        if lane.loop is not None:
            awaited = lane.wait(adapter.aexecute(request), what="aexecute()")
            if not receipts_equal(awaited, direct):
                raise ConformanceError("aexecute() returned a receipt that differs from execute()")
        run = _streamed(lane, request)  # Complete carries the receipt returned
        if run.receipt is None or not receipts_equal(run.receipt, direct):
            raise ConformanceError(f"{lane.prefix}execute_streaming() differs from execute()")


def _failure(lane: _Lane, request: ExecutionRequest) -> tuple[StreamRun, PortError]:
    run = _streamed(lane, request)
    if run.error is None:
        raise ConformanceError(f"{lane.prefix}execute() on the failing request did not raise")
    if lane.loop is not None:
        try:
            lane.wait(lane.adapter.aexecute(request), what="aexecute()")
        except PortError as again:
            if again.code == run.error.code:
                return run, run.error
        raise ConformanceError(f"aexecute() did not raise {run.error.code} as streaming did")
    return run, run.error


def check_failure_projection(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, asynchronous: bool = False
) -> None:
    """A failing request emits one ``Failed`` with a ``TQX_*`` code last, then raises it."""
    with _Lane(adapter, asynchronous) as lane:
        _failure(lane, request)


def check_sink_exception_propagates(
    adapter: RuntimeAdapter, request: ExecutionRequest, *, asynchronous: bool = False
) -> None:
    """An exception raised by the sink reaches the caller unchanged (host cancellation)."""
    sentinel = _Cancelled("cancelled by the conformance kit")

    def sink(event: StreamEvent) -> None:
        raise sentinel

    with _Lane(adapter, asynchronous) as lane:
        try:
            lane.stream(request, sink)
        except BaseException as raised:
            if raised is sentinel:
                return
            replaced = type(raised).__name__
            raise ConformanceError(f"sink exception was replaced by {replaced}") from None
    raise ConformanceError("sink raised, but the stream returned normally")


def _distinct(request: ExecutionRequest, index: int) -> ExecutionRequest:
    """``request`` with its last message marked ``#index``, so cross-talk is seen."""
    interaction = request.interaction
    if not interaction.messages:
        return request
    *head, last = interaction.messages
    marked = last.model_copy(update={"content": f"{last.content} #{index}"})
    return request.model_copy(
        update={"interaction": interaction.model_copy(update={"messages": [*head, marked]})}
    )


def check_concurrent_use(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    asynchronous: bool = False,
    threads: int = 8,
    calls: int = 10,
    tasks: int = 50,
    max_stall_s: float = 0.25,
) -> None:
    """Concurrent callers (threads x calls, or tasks) each get their own ``execute`` receipt."""
    requests = [_distinct(request, i) for i in range(tasks if asynchronous else threads)]
    expected = [adapter.execute(r) for r in requests]

    async def run() -> tuple[list[ExecutionReceipt], float]:
        stall, done = 0.0, asyncio.Event()

        async def ticker() -> None:
            nonlocal stall
            while not done.is_set():
                started = time.monotonic()
                await asyncio.sleep(0.005)
                stall = max(stall, time.monotonic() - started - 0.005)

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0)
        receipts = await asyncio.gather(*(adapter.aexecute(r) for r in requests))
        done.set()
        await tick
        return receipts, stall

    if asynchronous:
        with _Lane(adapter, True) as lane:
            receipts, stall = lane.wait(run(), what="async concurrent use")
    else:
        with ThreadPoolExecutor(max_workers=threads) as pool:
            receipts, stall = list(pool.map(adapter.execute, requests * calls)), 0.0
        expected *= calls
    if mismatched := sum(not receipts_equal(g, e) for g, e in zip(receipts, expected, strict=True)):
        raise ConformanceError(f"{mismatched} concurrent receipts differed (cross-talk?)")
    if stall >= max_stall_s:
        raise ConformanceError(f"the event loop was held for {stall:.2f} s during the calls")


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
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    expected_text: str | None = None,
    asynchronous: bool = False,
) -> None:
    """Deltas concatenate to ``expected_text`` and, on ``Complete``, to the output's JSON."""
    run = run_stream(adapter, request, asynchronous=asynchronous)
    if expected_text is not None and run.text != expected_text:
        raise ConformanceError(f"Delta texts concatenate to {run.text!r:.60}, not the sent text")
    if run.receipt is not None:
        try:
            same = fingerprint(orjson.loads(run.text)) == run.receipt.output_fingerprint
        except orjson.JSONDecodeError:
            same = False
        if not same:
            raise ConformanceError("Delta texts concatenate to something not the output's JSON")


def check_tool_call_assembly(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    expected: Sequence[tuple[str, str]],
    asynchronous: bool = False,
) -> None:
    """``ToolCallDelta`` fragments reassemble into exactly ``expected`` (name, arguments)."""
    got = assemble_tool_calls(run_stream(adapter, request, asynchronous=asynchronous).events)
    if len(got) != len(expected):
        raise ConformanceError(
            f"ToolCallDelta events assemble into {len(got)} calls, not {len(expected)}"
        )
    for position, (have, need) in enumerate(zip(got, expected, strict=True)):
        if have != tuple(need):
            raise ConformanceError(f"tool call {position} assembles to {have.name}, not {need}")


def check_midstream_failure(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    expected_text: str | None = None,
    expected_code: str | None = None,
    asynchronous: bool = False,
) -> None:
    """A broken stream emits its deltas so far, one ``Failed`` (a ``TQX_*`` code), then raises."""
    with _Lane(adapter, asynchronous) as lane:
        run, error = _failure(lane, request)
    if expected_code is not None and error.code != expected_code:
        raise ConformanceError(f"mid-stream failure raised {error.code}, expected {expected_code}")
    if not run.deltas:
        raise ConformanceError("0 deltas before Failed: the deltas received were dropped")
    if expected_text is not None and run.text != expected_text:
        raise ConformanceError(f"deltas before Failed were {run.text!r:.60}, not the sent text")


def check_cancellation(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    connection_released: Callable[[], bool],
    asynchronous: bool = False,
    cancel: Callable[[], None] | None = None,
    cancel_after_s: float | None = None,
    within_s: float = 2.0,
) -> None:
    """A cancel at the first delta (sink raising, ``cancel`` from a thread, the task cancelled
    or ``cancel_after_s`` in) ends the call within ``within_s`` and releases the connection."""
    first_delta, finished = threading.Event(), threading.Event()
    sentinel = _Cancelled("cancelled by the conformance kit")
    events: list[StreamEvent] = []
    cancelled: list[tuple[float, int]] = []  # when, and how many events had come by then
    sink_cancels = not asynchronous and cancel is None
    task: asyncio.Future[ExecutionReceipt] | None = None
    lane = _Lane(adapter, asynchronous)

    def cancel_task() -> None:  # on the loop
        if task is not None and not task.done() and not cancelled:
            cancelled.append((time.monotonic(), len(events)))
            task.cancel()

    def sink(event: StreamEvent) -> None:
        events.append(event)
        if isinstance(event, _DELTAS) and not first_delta.is_set():
            first_delta.set()
            if sink_cancels:
                cancelled.append((time.monotonic(), len(events)))
                raise sentinel
            if lane.loop is not None and cancel_after_s is None:
                # A thread-backed adapter calls the sink from its worker thread.
                lane.loop.call_soon_threadsafe(cancel_task)

    def signal_cancel() -> None:
        if first_delta.wait(timeout=30) and cancel is not None and not finished.is_set():
            cancelled.append((time.monotonic(), len(events)))
            cancel()

    async def run() -> ExecutionReceipt:
        nonlocal task
        task = asyncio.ensure_future(adapter.aexecute_streaming(request, sink))
        if cancel_after_s is not None:
            asyncio.get_running_loop().call_later(cancel_after_s, cancel_task)
        return await task

    helper = threading.Thread(target=signal_cancel, daemon=True)
    helper.start()
    raised: BaseException | None = None
    with lane:
        try:
            if lane.loop is None:
                adapter.execute_streaming(request, sink)
            else:
                lane.wait(run(), limit_s=2 * within_s + 5, what="the cancelled call")
        except ConformanceError:
            raise
        except BaseException as error:
            if lane.loop is not None and not isinstance(error, Exception):
                raise  # the caller's Ctrl-C as it waits, not the cancelled call's outcome
            raised = error
    ended = time.monotonic()
    finished.set()
    first_delta.set()
    helper.join(timeout=5)
    if not cancelled:
        raise ConformanceError("the call to cancel ended before it was cancelled")
    if raised is None:
        raise ConformanceError("cancelled, but the call returned normally")
    if raised is not (sentinel if sink_cancels else raised) or (
        lane.loop is not None and not isinstance(raised, FutureCancelled)
    ):
        raise ConformanceError(f"the cancel was replaced by {type(raised).__name__}")
    cancelled_at, seen = cancelled[0]
    # Async: no event after the cancel. Sync: no Complete at all (a signal's KeyboardInterrupt
    # still ends the stream with Failed).
    late = events[seen:] if lane.loop else [e for e in events if isinstance(e, CompleteEvent)]
    if late:
        raise ConformanceError(f"a cancelled stream emitted {type(late[0]).__name__}")
    if ended - cancelled_at > within_s:
        raise ConformanceError(f"reading went on for {ended - cancelled_at:.2f} s after the cancel")
    while not connection_released():
        if time.monotonic() - ended > within_s:
            raise ConformanceError(f"the connection was not released within {within_s:g} s")
        time.sleep(0.01)


def check_size_bound(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    max_bytes: int,
    bytes_sent: Callable[[], int] | None = None,
    asynchronous: bool = False,
) -> None:
    """A stream past ``max_bytes`` fails ``TQX_RUNTIME_INVALID_RESPONSE`` without reading it all."""
    run = run_stream(adapter, request, asynchronous=asynchronous)
    if run.error is None or run.error.code != codes.RUNTIME_INVALID_RESPONSE:
        got = "a receipt" if run.error is None else run.error.code
        raise ConformanceError(
            f"an oversized stream gave {got}, not {codes.RUNTIME_INVALID_RESPONSE}"
        )
    emitted = sum(
        len((e.text if isinstance(e, DeltaEvent) else e.arguments_fragment).encode())
        for e in run.deltas
    )
    if emitted > max_bytes:
        raise ConformanceError(f"{emitted} bytes of deltas emitted past a {max_bytes}-byte bound")
    if bytes_sent is not None and (sent := bytes_sent()) > 4 * max_bytes + 1024 * 1024:
        raise ConformanceError(f"the adapter kept reading: {sent} bytes sent for {max_bytes}")


def check_adapter(
    adapter: RuntimeAdapter,
    request: ExecutionRequest,
    *,
    asynchronous: bool = False,
    failing_request: ExecutionRequest | None = None,
    failing_adapter: RuntimeAdapter | None = None,
    expected_text: str | None = None,
    expected_tool_calls: Sequence[tuple[str, str]] | None = None,
    interleaved_tool_calls: tuple[ExecutionRequest, Sequence[tuple[str, str]]] | None = None,
    midstream_failure: ExecutionRequest | None = None,
    cancel_request: ExecutionRequest | None = None,
    connection_released: Callable[[], bool] | None = None,
    cancel_after_s: float | None = None,
    oversized_request: ExecutionRequest | None = None,
    max_bytes: int | None = None,
    threads: int = 8,
    calls: int = 10,
    tasks: int = 50,
) -> list[str]:
    """Run the port's checks and each check whose inputs are given; return the names run."""
    passed: list[str] = []

    def run(
        name: str, check: Callable[..., None], given: ExecutionRequest | None, **options: Any
    ) -> None:
        if given is not None:
            subject = failing_adapter or adapter if name == "failure_projection" else adapter
            check(subject, given, asynchronous=asynchronous, **options)
            passed.append(name)

    run("streaming_parity", check_streaming_parity, request)
    run("sink_exception_propagates", check_sink_exception_propagates, request)
    run("concurrent_use", check_concurrent_use, request, threads=threads, calls=calls, tasks=tasks)
    run("failure_projection", check_failure_projection, failing_request)
    text = None if expected_text is None else request
    run("delta_order", check_delta_order, text, expected_text=expected_text)
    tools = None if expected_tool_calls is None else request
    run("tool_call_assembly", check_tool_call_assembly, tools, expected=expected_tool_calls)
    interleaved, calls_sent = interleaved_tool_calls or (None, ())
    run("tool_call_interleaving", check_tool_call_assembly, interleaved, expected=calls_sent)
    run("midstream_failure", check_midstream_failure, midstream_failure)
    cancelled = None if connection_released is None else cancel_request
    released = {"connection_released": connection_released, "cancel_after_s": cancel_after_s}
    run("cancellation", check_cancellation, cancelled, **released)
    oversized = None if max_bytes is None else oversized_request
    run("size_bound", check_size_bound, oversized, max_bytes=max_bytes)
    return passed
