"""Calls racing ``close()``: once it returns, no call of the runtime returns a result.

Each call in flight ends ``TQX_RUNTIME_CLOSED`` (those still connecting or waiting for a
connection included), from the loop's own ``aclose`` or a ``close`` on another thread,
and its generation is exported at level ERROR before the export closes.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest, PortError, codes
from templiqx_langfuse import DeadlineTransport, LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from tests.conftest import MODEL_KEY, PUBLIC_KEY, SECRET_KEY
from tests.reliability.test_async_hosts import runtime_for
from tests.slow_upstream import slow_upstream


async def _aclose(runtime: LangfuseTracedRuntime) -> None:
    await runtime.aclose()


async def _close_from_a_thread(runtime: LangfuseTracedRuntime) -> None:
    await asyncio.to_thread(runtime.close)


CLOSES = {"aclose on the loop": _aclose, "close from another thread": _close_from_a_thread}
Close = Callable[[LangfuseTracedRuntime], Coroutine[Any, Any, None]]


def outcomes_after_close(
    base_url: str,
    close: Close,
    exporter: InMemorySpanExporter,
    request: ExecutionRequest,
    **model: object,
) -> tuple[list[str], float]:
    """Ten calls, the runtime closed after 0.5 s: each call's outcome, and how long after
    the close returned the last call ended."""

    async def run() -> tuple[list[str], float]:
        runtime = runtime_for(base_url, exporter=exporter, timeout_s=20, **model)
        tasks = [asyncio.create_task(runtime.aexecute(request)) for _ in range(10)]
        await asyncio.sleep(0.5)
        await close(runtime)
        closed_at = time.monotonic()
        done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        codes_ = [r.code if isinstance(r, PortError) else repr(r) for r in done]
        return codes_, time.monotonic() - closed_at

    return asyncio.run(run())


def errors_exported(exporter: InMemorySpanExporter) -> list[str]:
    return [
        str((span.attributes or {}).get(A.OBSERVATION_LEVEL))
        for span in exporter.get_finished_spans()
        if (span.attributes or {}).get(A.OBSERVATION_TYPE) == "generation"
    ]


@pytest.mark.parametrize("close", CLOSES.values(), ids=CLOSES.keys())
def test_calls_in_flight_end_closed_and_are_exported_as_errors(
    close: Close, greeting_request: ExecutionRequest
) -> None:
    exporter = InMemorySpanExporter()
    with slow_upstream(4.0) as upstream:
        outcomes, _ = outcomes_after_close(upstream.base_url, close, exporter, greeting_request)
    assert outcomes == [codes.RUNTIME_CLOSED] * 10
    assert errors_exported(exporter) == ["ERROR"] * 10


@pytest.mark.parametrize("close", CLOSES.values(), ids=CLOSES.keys())
def test_calls_waiting_for_a_connection_end_closed_too(
    close: Close, greeting_request: ExecutionRequest
) -> None:
    """Two connections for ten calls: eight wait in the pool when the close runs."""
    exporter = InMemorySpanExporter()
    with slow_upstream(4.0) as upstream:
        outcomes, after = outcomes_after_close(
            upstream.base_url, close, exporter, greeting_request, max_connections=2
        )
    assert outcomes == [codes.RUNTIME_CLOSED] * 10
    assert after < 3.0
    assert errors_exported(exporter) == ["ERROR"] * 10


@pytest.mark.parametrize("close", CLOSES.values(), ids=CLOSES.keys())
def test_calls_still_connecting_end_closed(
    close: Close, greeting_request: ExecutionRequest
) -> None:
    """A listener that accepts late: connections complete only after the close ran."""
    listener = socket.create_server(("127.0.0.1", 0), backlog=0)  # the rest wait in SYN
    port = listener.getsockname()[1]
    accepted: list[socket.socket] = []
    done = threading.Event()

    def accept_late() -> None:
        time.sleep(1.0)  # after the close
        listener.settimeout(0.2)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and not done.is_set():
            try:
                accepted.append(listener.accept()[0])
            except OSError:
                continue

    acceptor = threading.Thread(target=accept_late, daemon=True)
    acceptor.start()
    exporter = InMemorySpanExporter()
    try:
        base_url = f"http://127.0.0.1:{port}/v1"
        outcomes, _ = outcomes_after_close(base_url, close, exporter, greeting_request)
    finally:
        done.set()
        acceptor.join(10)
        for conn in accepted:
            conn.close()
        listener.close()
    assert outcomes == [codes.RUNTIME_CLOSED] * 10


def test_calls_from_threads_end_closed_and_are_exported_as_errors(
    greeting_request: ExecutionRequest,
) -> None:
    exporter = InMemorySpanExporter()
    outcomes: list[str] = []
    with slow_upstream(4.0) as upstream:
        runtime = runtime_for(upstream.base_url, exporter=exporter, timeout_s=20)

        def call() -> None:
            try:
                runtime.execute(greeting_request)
                outcomes.append("a result")
            except PortError as error:
                outcomes.append(error.code)

        threads = [threading.Thread(target=call) for _ in range(10)]
        for thread in threads:
            thread.start()
        time.sleep(0.5)
        runtime.close()
        closed_at = time.monotonic()
        for thread in threads:
            thread.join(10)
    assert outcomes == [codes.RUNTIME_CLOSED] * 10
    assert time.monotonic() - closed_at < 5
    assert errors_exported(exporter) == ["ERROR"] * 10


def test_close_on_the_loops_own_thread_does_not_block_it(
    greeting_request: ExecutionRequest,
) -> None:
    """Its calls cannot end while the loop's thread waits: ``close`` does not wait there."""

    async def run() -> tuple[float, list[str]]:
        with slow_upstream(4.0) as upstream:
            runtime = runtime_for(upstream.base_url, timeout_s=20)
            tasks = [asyncio.create_task(runtime.aexecute(greeting_request)) for _ in range(5)]
            await asyncio.sleep(0.3)
            started = time.monotonic()
            runtime.close()
            took = time.monotonic() - started
            done = await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 10)
        return took, [r.code if isinstance(r, PortError) else repr(r) for r in done]

    took, outcomes = asyncio.run(run())
    assert took < 1.0
    assert outcomes == [codes.RUNTIME_CLOSED] * 5


def test_a_call_on_a_lent_transport_answered_after_the_close_is_no_result(
    greeting_request: ExecutionRequest,
) -> None:
    """The runtime leaves a host's transport open: the answer still arrives, and is refused."""
    exporter = InMemorySpanExporter()
    lent = DeadlineTransport()
    outcomes: list[str] = []
    with slow_upstream(1.0) as upstream:
        runtime = LangfuseTracedRuntime(
            ModelConfig(base_url=upstream.base_url, api_key=MODEL_KEY, model="m", timeout_s=20),
            LangfuseConfig(
                public_key=f"{PUBLIC_KEY}-lent",
                secret_key=SECRET_KEY,
                base_url="http://127.0.0.1:9",
            ),
            span_exporter=exporter,
            transport=lent,
        )

        def call() -> None:
            try:
                runtime.execute(greeting_request)
                outcomes.append("a result")
            except PortError as error:
                outcomes.append(error.code)

        threads = [threading.Thread(target=call) for _ in range(3)]
        for thread in threads:
            thread.start()
        time.sleep(0.3)
        runtime.close()  # waits for the three answers (about 0.7 s), so they are exported
        assert sorted(outcomes) == [codes.RUNTIME_CLOSED] * 3
        for thread in threads:
            thread.join(5)
        assert upstream.calls == 3
    lent.close()
    assert errors_exported(exporter) == ["ERROR"] * 3
