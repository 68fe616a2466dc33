"""The reference streaming host passes the whole kit, and each streaming check catches a
deliberately broken adapter (real sockets throughout)."""

from __future__ import annotations

import asyncio
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from templiqx_core import (
    AdapterDescriptor,
    CompleteEvent,
    DeltaEvent,
    EventSink,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    RuntimeAdapter,
    StreamEvent,
    ToolCallDeltaEvent,
)
from templiqx_core.adapters import build_receipt
from templiqx_core.conformance import (
    ConformanceError,
    assemble_tool_calls,
    check_adapter,
    check_cancellation,
    check_delta_order,
    check_midstream_failure,
    check_size_bound,
    check_streaming_parity,
    check_tool_call_assembly,
    run_stream,
)
from templiqx_streaming_host import StreamingHostRuntime
from tests.loopback import LoopbackModelServer, Reply
from tests.streaming.conftest import (
    INTERLEAVED,
    INTERLEAVED_CALLS,
    HostFactory,
    chunk,
    sse,
    streamed,
    text_stream,
)

PARTS = ['{"greeting": ', '"Hel', "lo Ry", 'an"}']
TEXT = "".join(PARTS)
TOOLS = sse(
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 0,
                            "id": "a",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": ""},
                        }
                    ]
                },
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]},
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]},
            }
        ]
    },
    {
        "choices": [
            {
                "index": 0,
                "delta": {
                    "tool_calls": [
                        {
                            "index": 1,
                            "id": "b",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
                        }
                    ]
                },
            }
        ]
    },
    chunk(finish="tool_calls"),
)
TOOL_CALLS = [("get_weather", '{"city": "Paris"}'), ("get_weather", '{"city": "Oslo"}')]
BROKEN_OFF = sse(*[chunk(p) for p in PARTS[:2]], {"error": {"message": "boom"}}, done=False)
# JSON in 100 deltas, served in 100 pieces 20-50 ms apart: seconds if read to the end
SLOW = text_stream(['{"greeting": "', *["x"] * 98, '"}'])
OVERSIZED = sse(
    chunk('{"greeting": "'),
    *[chunk("a" * 1000) for _ in range(300)],
    chunk('"}'),
    chunk(finish="stop"),
)


def reply_for(body: bytes, *, pause_s: float = 0.0, piece: int = 0) -> Reply:
    if piece:
        return streamed(
            body, pieces=[body[i : i + piece] for i in range(0, len(body), piece)], pause_s=pause_s
        )
    return streamed(body)


class Routes:
    """Answers by the request's first user message: one server, several streams."""

    def __init__(self, server: LoopbackModelServer) -> None:
        self.server = server
        self.replies: dict[str, Reply] = {}
        server.set_responder(self.answer)

    def answer(self, request: Any) -> Reply:
        content = request.json()["messages"][-1]["content"]
        # The async kit marks each task's request ``name #i``: the same route.
        return self.replies.get(re.sub(r" #\d+$", "", content), Reply(404))

    def request(self, base: ExecutionRequest, name: str, reply: Reply) -> ExecutionRequest:
        self.replies[name] = reply
        interaction = base.interaction
        messages = [m.model_copy(update={"content": name}) for m in interaction.messages]
        return ExecutionRequest(interaction=interaction.model_copy(update={"messages": messages}))


@pytest.fixture
def routes(stream_server: LoopbackModelServer) -> Routes:
    return Routes(stream_server)


def released(server: LoopbackModelServer) -> Callable[[], bool]:
    before = server.aborted
    return lambda: server.aborted > before


def test_the_reference_host_passes_every_check(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    host = make_host(max_response_bytes=16 * 1024)
    passed = check_adapter(
        host,
        routes.request(plain_request, "ok", reply_for(text_stream(PARTS), piece=7)),
        expected_text=TEXT,
        expected_tool_calls=[],
        midstream_failure=routes.request(plain_request, "broken", reply_for(BROKEN_OFF)),
        cancel_request=routes.request(
            plain_request, "slow", reply_for(SLOW, pause_s=0.05, piece=len(SLOW) // 100)
        ),
        connection_released=released(routes.server),
        oversized_request=routes.request(
            plain_request, "big", reply_for(OVERSIZED, pause_s=0.001, piece=4096)
        ),
        max_bytes=16 * 1024,
        interleaved_tool_calls=(
            routes.request(plain_request, "interleaved", reply_for(INTERLEAVED, piece=11)),
            INTERLEAVED_CALLS,
        ),
        failing_request=routes.request(plain_request, "503", Reply(503)),
        threads=4,
        calls=5,
    )
    assert passed == [
        "streaming_parity",
        "sink_exception_propagates",
        "concurrent_use",
        "failure_projection",
        "delta_order",
        "tool_call_assembly",
        "tool_call_interleaving",
        "midstream_failure",
        "cancellation",
        "size_bound",
    ]
    tools = routes.request(plain_request, "tools", reply_for(TOOLS, piece=5))
    check_tool_call_assembly(host, tools, expected=TOOL_CALLS)


def test_cancel_signal_while_blocked_in_a_read(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    """SIGINT (Ctrl-C) arrives while the host waits for the next piece: KeyboardInterrupt
    ends the call at once and the connection is closed."""
    assert threading.current_thread() is threading.main_thread()
    slow = routes.request(
        plain_request, "slow", reply_for(SLOW, pause_s=0.05, piece=len(SLOW) // 100)
    )
    main = threading.main_thread().ident
    assert main is not None
    # Ctrl-C as Python delivers it: the default handler, raised in the main thread. Set
    # explicitly (an earlier test or plugin may have replaced it) and aimed at the main
    # thread (a process-directed signal may land on the helper thread, leaving the
    # blocked read uninterrupted).
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        check_cancellation(
            make_host(),
            slow,
            connection_released=released(routes.server),
            cancel=lambda: signal.pthread_kill(main, signal.SIGINT),
        )
    finally:
        signal.signal(signal.SIGINT, previous)


# -- broken adapters: each check catches one ------------------------------------------


class Rewrites(RuntimeAdapter):
    """Wraps the real host and rewrites the events it streams (how each one is broken)."""

    def __init__(self, inner: StreamingHostRuntime) -> None:
        self.inner = inner

    def descriptor(self) -> AdapterDescriptor:
        return self.inner.descriptor()

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        return self.inner.execute(request)

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        held: list[StreamEvent] = []
        try:
            receipt = self.inner.execute_streaming(request, held.append)
        finally:
            for event in self.rewrite(held):
                sink(event)
        return receipt

    def rewrite(self, events: list[StreamEvent]) -> list[StreamEvent]:
        raise NotImplementedError


class ReversedDeltas(Rewrites):
    def rewrite(self, events: list[StreamEvent]) -> list[StreamEvent]:
        return [*reversed(events[:-1]), events[-1]]


class NamesEveryFragment(Rewrites):
    def rewrite(self, events: list[StreamEvent]) -> list[StreamEvent]:
        out: list[StreamEvent] = []
        name = ""
        for event in events:
            if isinstance(event, ToolCallDeltaEvent):
                name = event.name or name
                event = ToolCallDeltaEvent(name=name, arguments_fragment=event.arguments_fragment)
            out.append(event)
        return out


class FailedTwice(Rewrites):
    def rewrite(self, events: list[StreamEvent]) -> list[StreamEvent]:
        return [*events, events[-1]] if isinstance(events[-1], FailedEvent) else events


class DropsDeltasOnFailure(Rewrites):
    """Buffers deltas and sends them only with a Complete."""

    def rewrite(self, events: list[StreamEvent]) -> list[StreamEvent]:
        return events if isinstance(events[-1], CompleteEvent) else events[-1:]


class ReceiptDiffers(Rewrites):
    def rewrite(self, events: list[StreamEvent]) -> list[StreamEvent]:
        last = events[-1]
        if isinstance(last, CompleteEvent):
            other = build_receipt(last.adapter, self.request.interaction, {"other": True})
            return [*events[:-1], CompleteEvent.from_receipt(other)]
        return events

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        self.request = request
        return super().execute_streaming(request, sink)


class ReadsOnAfterCancel(StreamingHostRuntime):
    """Swallows the sink's exception, reads to the end, then re-raises it."""

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        raised: list[BaseException] = []

        def tolerant(event: StreamEvent) -> None:
            if raised:
                return
            try:
                sink(event)
            except Exception as error:
                raised.append(error)

        receipt = super().execute_streaming(request, tolerant)
        if raised:
            raise raised[0]
        return receipt


class LeaksTheConnection(StreamingHostRuntime):
    """Stops on cancel but leaves the response open (never closed, never drained)."""

    leaked: list[Any] = []  # client, response and reader, kept alive: nothing closes them

    def execute_streaming(self, request: ExecutionRequest, sink: EventSink) -> ExecutionReceipt:
        http = httpx.Client()
        response = http.send(http.build_request("POST", self._wiring.url, json={}), stream=True)
        lines = response.iter_lines()
        self.leaked.append((http, response, lines))
        for line in lines:
            if line.startswith("data: {"):
                sink(DeltaEvent(text="x"))
        raise AssertionError("unreachable: the stream is cancelled at the first delta")


def _broken_cases() -> Iterator[Any]:
    yield pytest.param(
        ReversedDeltas,
        check_delta_order,
        "ok",
        {"expected_text": TEXT},
        "concatenate to",
        id="delta-order:reversed",
    )
    yield pytest.param(
        NamesEveryFragment,
        check_tool_call_assembly,
        "tools",
        {"expected": TOOL_CALLS},
        "assemble into 3 calls, not 2",
        id="tool-calls:name-on-every-fragment",
    )
    yield pytest.param(
        FailedTwice,
        run_stream,
        "broken",
        {},
        "2 terminal events",
        id="terminal:failed-twice",
    )
    yield pytest.param(
        DropsDeltasOnFailure,
        check_midstream_failure,
        "broken",
        {},
        "0 deltas before Failed",
        id="midstream:drops-deltas",
    )
    yield pytest.param(
        ReceiptDiffers,
        check_streaming_parity,
        "ok",
        {},
        "differs from the returned",
        id="parity:other-receipt",
    )


@pytest.mark.parametrize(("broken", "check", "route", "options", "message"), list(_broken_cases()))
def test_each_check_catches_a_broken_adapter(
    broken: type[Rewrites],
    check: Callable[..., None],
    route: str,
    options: dict[str, Any],
    message: str,
    routes: Routes,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    bodies = {"ok": text_stream(PARTS), "tools": TOOLS, "broken": BROKEN_OFF}
    request = routes.request(plain_request, route, reply_for(bodies[route], piece=9))
    check(make_host(), request, **options)  # the real host passes
    with pytest.raises(ConformanceError, match=message):
        check(broken(make_host()), request, **options)


def test_cancellation_catches_a_host_that_reads_on(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    slow = routes.request(
        plain_request, "slow", reply_for(SLOW, pause_s=0.02, piece=len(SLOW) // 100)
    )
    with pytest.raises(ConformanceError, match="reading went on"):
        check_cancellation(
            make_host(cls=ReadsOnAfterCancel),
            slow,
            connection_released=released(routes.server),
            within_s=1.0,
        )


def test_cancellation_catches_a_leaked_connection(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    routes.server.set_responder(
        lambda request: reply_for(SLOW, pause_s=0.05, piece=len(SLOW) // 100)
    )
    host = make_host(cls=LeaksTheConnection)
    try:
        with pytest.raises(ConformanceError, match="connection was not released"):
            check_cancellation(
                host, plain_request, connection_released=released(routes.server), within_s=1.0
            )
    finally:
        for http, response, lines in LeaksTheConnection.leaked:
            lines.close()
            response.close()
            http.close()


def test_size_bound_catches_an_unbounded_host(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    big = routes.request(plain_request, "big", reply_for(OVERSIZED, piece=4096))
    with pytest.raises(ConformanceError, match="gave a receipt, not TQX_RUNTIME_INVALID_RESPONSE"):
        check_size_bound(make_host(), big, max_bytes=16 * 1024)  # default bound is 2 MiB


def test_assembly_rule_needs_a_name_first() -> None:
    with pytest.raises(ConformanceError, match="before any call was opened"):
        assemble_tool_calls([ToolCallDeltaEvent(name="", arguments_fragment="{}")])
    calls = assemble_tool_calls(
        [
            DeltaEvent(text="a"),
            ToolCallDeltaEvent(name="f", arguments_fragment='{"x":'),
            ToolCallDeltaEvent(name="", arguments_fragment="1}"),
            ToolCallDeltaEvent(name="f", arguments_fragment=""),
        ]
    )
    assert [(c.name, c.arguments) for c in calls] == [("f", '{"x":1}'), ("f", "")]


def test_async_host_cancelling_the_task_releases_the_connection(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    """``aexecute_streaming`` (the port's async face): cancelling the awaiting task ends
    the stream at the next delta, and the host closes its connection."""
    slow = routes.request(
        plain_request, "slow", reply_for(SLOW, pause_s=0.05, piece=len(SLOW) // 100)
    )
    host = make_host()
    connection_released = released(routes.server)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.Event()

        def sink(event: StreamEvent) -> None:
            loop.call_soon_threadsafe(first.set)

        task = asyncio.create_task(host.aexecute_streaming(slow, sink))
        await asyncio.wait_for(first.wait(), timeout=5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    started = time.monotonic()
    asyncio.run(scenario())
    while not connection_released():
        assert time.monotonic() - started < 2.0, "the connection was not released"
        time.sleep(0.01)
