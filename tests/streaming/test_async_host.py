"""The streaming host over async SSE: deltas on the event loop as they arrive, the async
conformance checks passed, and each async check catching a deliberately broken adapter."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from templiqx_core import (
    AdapterDescriptor,
    DeltaEvent,
    ExecutionRequest,
    RuntimeAdapter,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
    ScriptedRuntime,
    ScriptedSuccess,
    StreamEvent,
)
from templiqx_core.adapters import RuntimeCall
from templiqx_core.conformance import (
    ConformanceError,
    check_adapter,
    check_cancellation,
    check_concurrent_use,
    check_failure_projection,
    check_streaming_parity,
)
from tests.loopback import LoopbackModelServer, Reply
from tests.streaming.conftest import HostFactory, text_stream
from tests.streaming.test_host_conformance import (
    PARTS,
    SLOW,
    TEXT,
    Routes,
    released,
    reply_for,
)


@pytest.fixture
def routes(stream_server: LoopbackModelServer) -> Routes:
    return Routes(stream_server)


def test_deltas_reach_an_async_sink_as_they_arrive(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    """Pieces 50 ms apart: each delta is handed over before the next piece is sent."""
    request = routes.request(
        plain_request, "paced", reply_for(text_stream(PARTS), pause_s=0.05, piece=60)
    )
    host = make_host()
    arrivals: list[tuple[float, StreamEvent]] = []

    async def run() -> Any:
        loop = asyncio.get_running_loop()
        return await host.aexecute_streaming(
            request, lambda event: arrivals.append((loop.time(), event))
        )

    receipt = asyncio.run(run())
    deltas = [(at, e) for at, e in arrivals if isinstance(e, DeltaEvent)]
    assert "".join(e.text for _, e in deltas) == TEXT
    assert deltas[-1][0] - deltas[0][0] > 0.1  # spread over the stream, not at its end
    assert receipt.output == {"greeting": "Hello Ryan"}
    assert receipt == host.execute(request)


def test_the_streaming_host_passes_the_async_checks(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    passed = check_adapter(
        make_host(),
        routes.request(plain_request, "ok", reply_for(text_stream(PARTS), piece=7)),
        failing_request=routes.request(plain_request, "503", Reply(503)),
        cancel_request=routes.request(
            plain_request, "slow", reply_for(SLOW, pause_s=0.05, piece=len(SLOW) // 100)
        ),
        connection_released=released(routes.server),
        expected_text=TEXT,
        tasks=20,
        asynchronous=True,
    )
    assert passed == [
        "streaming_parity",
        "sink_exception_propagates",
        "concurrent_use",
        "failure_projection",
        "delta_order",
        "cancellation",
    ]


def test_cancelling_a_stream_stops_reading_at_once(
    routes: Routes, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    """The slow stream would take seconds; cancelled at its first delta, the task ends
    within a read and the server sees the connection closed."""
    slow = routes.request(
        plain_request, "slow", reply_for(SLOW, pause_s=0.05, piece=len(SLOW) // 100)
    )
    started = time.monotonic()
    check_cancellation(
        make_host(),
        slow,
        connection_released=released(routes.server),
        within_s=0.5,
        asynchronous=True,
    )
    assert time.monotonic() - started < 2.0


class Diverges(RuntimeAdapter):
    """Answers differently on the event loop: ``async_parity`` must catch it."""

    def __init__(self) -> None:
        self.inner = ScriptedRuntime([ScriptedSuccess(output={"greeting": "sync"})])

    def descriptor(self) -> AdapterDescriptor:
        return self.inner.descriptor()

    def produce_output(self, call: RuntimeCall) -> Any:
        return {"greeting": "sync"}

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        return {"greeting": "async"}


class IgnoresCancel(RuntimeAdapter):
    """Keeps streaming after its task was cancelled: ``async_cancellation`` must catch it."""

    def descriptor(self) -> AdapterDescriptor:
        return AdapterDescriptor(id="ignores-cancel", version="0", capabilities=[])

    def produce_output(self, call: RuntimeCall) -> Any:
        raise NotImplementedError

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        for _ in range(20):
            call.emit(DeltaEvent(text="x"))
            try:
                await asyncio.sleep(0.05)
            except asyncio.CancelledError:
                continue  # swallowed: the stream goes on
        return {"greeting": "x"}


class TiedToItsFirstLoop(Diverges):
    """Answers the same either way, but only on the event loop it first ran on (a pool
    bound to one loop, as a host's client is)."""

    loop: asyncio.AbstractEventLoop | None = None

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        self.loop = self.loop or asyncio.get_running_loop()
        if self.loop is not asyncio.get_running_loop():
            raise RuntimeError("bound to a different event loop")
        return {"greeting": "sync"}


class FailsOnItsFirstLoop(TiedToItsFirstLoop):
    async def aproduce_output(self, call: RuntimeCall) -> Any:
        await super().aproduce_output(call)
        failure = RuntimeFailure.for_adapter(call.adapter, RuntimeFailureCode.UNAVAILABLE, "down")
        raise RuntimeFailureError(failure)


@pytest.mark.parametrize(
    ("check", "adapter"),
    [
        (check_streaming_parity, TiedToItsFirstLoop),
        (check_failure_projection, FailsOnItsFirstLoop),
    ],
)
def test_an_async_check_runs_its_calls_on_one_event_loop(
    check: Any, adapter: type[RuntimeAdapter], plain_request: ExecutionRequest
) -> None:
    """As a host does: an adapter tied to its first loop passes (each call used to get a
    fresh loop, failing with a raw RuntimeFailureError instead of a ConformanceError)."""
    check(adapter(), plain_request, asynchronous=True)


def test_async_parity_catches_an_adapter_that_answers_differently_on_the_loop(
    plain_request: ExecutionRequest,
) -> None:
    with pytest.raises(ConformanceError, match="aexecute"):
        check_streaming_parity(Diverges(), plain_request, asynchronous=True)


def test_async_cancellation_catches_an_adapter_that_ignores_the_cancel(
    plain_request: ExecutionRequest,
) -> None:
    with pytest.raises(ConformanceError, match="cancel"):
        check_cancellation(
            IgnoresCancel(), plain_request, connection_released=lambda: True, asynchronous=True
        )


def test_a_sync_only_adapter_passes_the_async_checks_in_a_worker_thread(
    plain_request: ExecutionRequest,
) -> None:
    adapter = ScriptedRuntime([ScriptedSuccess(output={"greeting": "hi"})])
    passed = check_adapter(adapter, plain_request, asynchronous=True)
    assert passed == ["streaming_parity", "sink_exception_propagates", "concurrent_use"]


class SwallowsCancel(RuntimeAdapter):
    """Never lets its task be cancelled: the check must fail, not hang."""

    def descriptor(self) -> AdapterDescriptor:
        return AdapterDescriptor(id="swallows-cancel", version="0", capabilities=[])

    def produce_output(self, call: RuntimeCall) -> Any:
        raise NotImplementedError

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        while True:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                continue


class BlocksTheLoop(Diverges):
    """Answers the same either way, but sleeps on the event loop's thread."""

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        time.sleep(0.3)
        return {"greeting": "sync"}


class CrossTalk(RuntimeAdapter):
    """Answers each task from whichever request arrived last: shared state across tasks."""

    def __init__(self) -> None:
        self.current: ExecutionRequest | None = None

    def descriptor(self) -> AdapterDescriptor:
        return AdapterDescriptor(id="cross-talk", version="0", capabilities=[])

    def produce_output(self, call: RuntimeCall) -> Any:
        return {"greeting": call.request.interaction.messages[-1].content}

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        self.current = call.request
        await asyncio.sleep(0.01)
        assert self.current is not None
        return {"greeting": self.current.interaction.messages[-1].content}


def test_async_cancellation_fails_on_a_task_that_cannot_be_cancelled(
    plain_request: ExecutionRequest,
) -> None:
    started = time.monotonic()
    with pytest.raises(ConformanceError, match="did not end"):
        check_cancellation(
            SwallowsCancel(),
            plain_request,
            connection_released=lambda: True,
            cancel_after_s=0.1,
            within_s=0.5,
            asynchronous=True,
        )
    assert time.monotonic() - started < 15


@pytest.mark.parametrize(
    ("adapter", "catches"),
    [(BlocksTheLoop, "held"), (CrossTalk, "cross-talk")],
    ids=["blocking call on the loop", "cross-talk between tasks"],
)
def test_async_concurrent_use_catches(
    adapter: type[RuntimeAdapter], catches: str, plain_request: ExecutionRequest
) -> None:
    with pytest.raises(ConformanceError, match=catches):
        check_concurrent_use(adapter(), plain_request, tasks=10, asynchronous=True)
