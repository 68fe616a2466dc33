"""Async hosts (FastAPI, LangGraph, pydantic-ai) get the runtime's full concurrency.

``aexecute`` runs on the event loop, natively: no worker thread per call, so a burst of
calls is as concurrent as the pool allows, the loop stays responsive, per-task trace
attributes stay per task, and cancelling a task stops its call at once. Sync hosts
sharing one runtime across hundreds of threads get no spurious errors.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import (
    CompiledMessage,
    ExecutionRequest,
    PortError,
    RuntimeFailureError,
    codes,
)
from templiqx_core.conformance import (
    check_cancellation,
    check_concurrent_use,
    check_failure_projection,
    check_streaming_parity,
)
from templiqx_langfuse import (
    AsyncDeadlineTransport,
    LangfuseConfig,
    LangfuseTracedRuntime,
    ModelConfig,
    RetryingRuntime,
    trace_attributes,
)
from tests.conftest import MODEL_KEY, PUBLIC_KEY, SECRET_KEY, assert_closed, closed_port
from tests.loopback import LoopbackModelServer, Reply
from tests.reliability.test_hostile_fork import run_in_child
from tests.slow_upstream import Upstream, slow_upstream


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with slow_upstream(0.3) as server:
        yield server


def runtime_for(
    base_url: str,
    *,
    exporter: InMemorySpanExporter | None = None,
    timeout_s: float = 10.0,
    **model: object,
) -> LangfuseTracedRuntime:
    langfuse = (
        LangfuseConfig(
            public_key=f"{PUBLIC_KEY}-async-{id(exporter)}",
            secret_key=SECRET_KEY,
            base_url="http://127.0.0.1:9",
        )
        if exporter is not None
        else LangfuseConfig()
    )
    return LangfuseTracedRuntime(
        ModelConfig(
            base_url=base_url,
            api_key=MODEL_KEY,
            model="test-model",
            timeout_s=timeout_s,
            **model,  # type: ignore[arg-type]
        ),
        langfuse,
        span_exporter=exporter,
    )


def saying(request: ExecutionRequest, text: str) -> ExecutionRequest:
    """The request with its last message replaced (the echo upstream answers with it)."""
    interaction = request.interaction
    messages = [*interaction.messages[:-1], CompiledMessage(role="user", content=text)]
    return ExecutionRequest(interaction=interaction.model_copy(update={"messages": messages}))


def test_a_burst_of_async_calls_is_all_in_flight_at_once(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    """300 calls of 0.3 s each from one loop: all in flight together, each its own answer
    (through a thread pool of six they took 17 times as long)."""

    async def burst() -> tuple[list[object], float]:
        async with runtime_for(upstream.base_url) as runtime:
            started = time.monotonic()
            receipts = await asyncio.gather(
                *(runtime.aexecute(saying(greeting_request, f"call {i}")) for i in range(300))
            )
            return [r.output for r in receipts], time.monotonic() - started

    outputs, elapsed = asyncio.run(burst())
    assert outputs == [{"greeting": f"call {i}"} for i in range(300)]
    assert upstream.max_in_flight == 300
    assert elapsed < 3.0  # 0.3 s of upstream time, generous for a loaded 2-core machine


def test_the_event_loop_is_never_blocked_by_a_call(greeting_request: ExecutionRequest) -> None:
    """A hanging upstream, tracing on: a 5 ms ticker keeps ticking while calls wait, time
    out and are traced (the export stays on its worker thread)."""
    exporter = InMemorySpanExporter()

    async def run() -> tuple[list[float], list[BaseException | object]]:
        lags: list[float] = []
        done = asyncio.Event()

        async def ticker() -> None:
            while not done.is_set():
                started = time.perf_counter()
                await asyncio.sleep(0.005)
                lags.append(time.perf_counter() - started - 0.005)

        with slow_upstream(30.0) as hanging:
            async with runtime_for(hanging.base_url, exporter=exporter, timeout_s=0.5) as rt:
                tick = asyncio.create_task(ticker())
                results = await asyncio.gather(
                    *(rt.aexecute(greeting_request) for _ in range(20)), return_exceptions=True
                )
                done.set()
                await tick
        return lags, results

    lags, results = asyncio.run(run())
    assert all(isinstance(r, RuntimeFailureError) for r in results)
    assert {r.code for r in results if isinstance(r, RuntimeFailureError)} == {
        "TQX_RUNTIME_TIMEOUT"
    }
    assert len(lags) > 40
    assert max(lags) < 0.25  # no call ever held the loop (a blocked one holds it 0.5 s)
    assert len(exporter.get_finished_spans()) == 20


def test_each_task_keeps_its_own_trace_attributes(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    exporter = InMemorySpanExporter()

    async def run() -> None:
        async with runtime_for(upstream.base_url, exporter=exporter) as runtime:

            async def as_user(i: int) -> None:
                with trace_attributes(user_id=f"user-{i}", session_id=f"s-{i}"):
                    await runtime.aexecute(saying(greeting_request, f"for user-{i}"))

            await asyncio.gather(*(as_user(i) for i in range(100)))

    asyncio.run(run())
    spans = exporter.get_finished_spans()
    assert len(spans) == 100  # each generation exported once
    for span in spans:
        attributes = span.attributes or {}
        said = str(attributes[A.OBSERVATION_OUTPUT])
        user = attributes[A.TRACE_USER_ID]
        assert f"for {user}" in said
        assert attributes[A.TRACE_SESSION_ID] == f"s-{str(user).removeprefix('user-')}"


def test_cancelling_the_task_stops_the_call_and_the_runtime_stays_usable(
    greeting_request: ExecutionRequest,
) -> None:
    exporter = InMemorySpanExporter()

    async def run() -> tuple[float, object]:
        with slow_upstream(30.0) as hanging:
            runtime = runtime_for(hanging.base_url, exporter=exporter, timeout_s=20)
            task = asyncio.create_task(runtime.aexecute(greeting_request))
            await asyncio.sleep(0.3)
            started = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            stopped = time.monotonic() - started
            hanging.delay_s = 0.0
            again = await runtime.aexecute(greeting_request)
            await runtime.aclose()
            return stopped, again.output

    stopped, output = asyncio.run(run())
    assert stopped < 0.2
    assert output == {"greeting": "Hello Ryan for Blinqx"}
    spans = exporter.get_finished_spans()
    assert len(spans) == 2
    cancelled = next(s for s in spans if s.status.status_code.name == "ERROR")
    assert (
        cancelled.status.description
        == f"{codes.RUNTIME_INTERRUPTED}: execution interrupted (CancelledError)"
    )


def test_beyond_max_connections_calls_wait_for_a_connection_within_their_deadline(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    """Two connections, six calls of 0.3 s: they queue, two at a time, and all succeed."""

    async def run() -> list[object]:
        async with runtime_for(upstream.base_url, max_connections=2) as runtime:
            return await asyncio.gather(
                *(runtime.aexecute(greeting_request) for _ in range(6)), return_exceptions=True
            )

    started = time.monotonic()
    patient = asyncio.run(run())
    assert time.monotonic() - started >= 0.85  # three rounds of two
    assert all(not isinstance(r, BaseException) for r in patient)
    assert upstream.max_in_flight == 2


def test_waiting_for_a_connection_counts_against_the_deadline(
    greeting_request: ExecutionRequest,
) -> None:
    """Both connections of a pool held by calls to a hanging upstream: a call with a 0.5 s
    deadline waits for one, and fails when its deadline passes, saying what it waited for."""

    async def run() -> tuple[RuntimeFailureError, float]:
        with slow_upstream(30.0) as hanging:
            pool = AsyncDeadlineTransport(limits=httpx.Limits(max_connections=2))
            holder = LangfuseTracedRuntime(
                ModelConfig(base_url=hanging.base_url, api_key=MODEL_KEY, model="m", timeout_s=10),
                async_transport=pool,
            )
            hurried = LangfuseTracedRuntime(
                ModelConfig(base_url=hanging.base_url, api_key=MODEL_KEY, model="m", timeout_s=0.5),
                async_transport=pool,
            )
            holding = [asyncio.create_task(holder.aexecute(greeting_request)) for _ in range(2)]
            while hanging.in_flight < 2:
                await asyncio.sleep(0.01)
            started = time.monotonic()
            with pytest.raises(RuntimeFailureError) as raised:
                await hurried.aexecute(greeting_request)
            elapsed = time.monotonic() - started
            for task in holding:
                task.cancel()
            await asyncio.gather(*holding, return_exceptions=True)
            await hurried.aclose()
            await holder.aclose()
            await pool.aclose()
            return raised.value, elapsed

    error, elapsed = asyncio.run(run())
    assert error.code == "TQX_RUNTIME_TIMEOUT"
    assert "no connection became free" in error.failure.detail
    assert 0.4 < elapsed < 1.5


def test_three_hundred_threads_on_one_sync_runtime_get_no_errors(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    """Two waves of 300 threads, keep-alive connections reused in the second. On httpcore 1's
    pool about one call in 2000 failed (ReadError): a thread finishing its response closed
    an idle connection the pool had just handed to another thread."""
    runtime = runtime_for(upstream.base_url)
    failures: list[str] = []
    lock = threading.Lock()

    def call(i: int) -> None:
        try:
            assert runtime.execute(saying(greeting_request, f"t{i}")).output == {
                "greeting": f"t{i}"
            }
        except PortError as error:
            with lock:
                failures.append(f"{error.code}: {error}")

    with ThreadPoolExecutor(300) as pool:
        for _wave in range(2):
            list(pool.map(call, range(300)))
    runtime.close()
    assert failures == []
    assert upstream.calls == 600


def test_aexecute_and_execute_share_one_runtime_and_close_releases_both(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest
) -> None:
    runtime = runtime_for(model_server.base_url)
    receipt = runtime.execute(greeting_request)

    async def on_a_loop() -> object:
        return (await runtime.aexecute(greeting_request)).output

    assert asyncio.run(on_a_loop()) == receipt.output
    runtime.close()  # from sync code, after the loop is gone
    assert_closed(runtime, greeting_request)

    async def after_close() -> None:
        with pytest.raises(PortError) as raised:
            await runtime.aexecute(greeting_request)
        assert raised.value.code == codes.RUNTIME_CLOSED

    asyncio.run(after_close())


def test_close_from_another_thread_fails_a_call_in_flight_on_the_loop(
    greeting_request: ExecutionRequest,
) -> None:
    async def run() -> PortError:
        with slow_upstream(30.0) as hanging:
            runtime = runtime_for(hanging.base_url, timeout_s=20)
            task = asyncio.create_task(runtime.aexecute(greeting_request))
            await asyncio.sleep(0.3)
            await asyncio.to_thread(runtime.close)
            with pytest.raises(PortError) as raised:
                await asyncio.wait_for(task, 5)
            return raised.value

    error = asyncio.run(run())
    assert error.code == codes.RUNTIME_CLOSED


def test_async_retries_wait_the_servers_hint_on_the_loop(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest
) -> None:
    answers = iter([Reply(429, {"retry-after-ms": "200"}, b"{}")])

    def responder(request: object) -> Reply:
        from tests.conftest import ok_reply

        return next(answers, None) or ok_reply(request)  # type: ignore[arg-type]

    model_server.set_responder(responder)
    ticks: list[float] = []

    async def tick() -> None:
        while True:
            ticks.append(time.monotonic())
            await asyncio.sleep(0.02)

    async def run() -> object:
        retrying = RetryingRuntime(runtime_for(model_server.base_url), attempts=3)
        ticker = asyncio.create_task(tick())
        async with retrying:
            output = (await retrying.aexecute(greeting_request)).output
        ticker.cancel()
        return output

    started = time.monotonic()
    assert asyncio.run(run()) == {"greeting": "Hello Ryan"}
    assert time.monotonic() - started >= 0.2  # the hint was waited
    assert len(ticks) >= 5  # on the loop: other tasks ran meanwhile
    assert len(model_server.requests) == 2


def test_async_retries_end_within_the_deadline(
    greeting_request: ExecutionRequest,
) -> None:
    async def run() -> tuple[RuntimeFailureError, float]:
        with slow_upstream(30.0) as hanging:
            retrying = RetryingRuntime(
                runtime_for(hanging.base_url, timeout_s=5), attempts=5, deadline_s=1.0
            )
            started = time.monotonic()
            with pytest.raises(RuntimeFailureError) as raised:
                await retrying.aexecute(greeting_request)
            elapsed = time.monotonic() - started
            await retrying.aclose()
            return raised.value, elapsed

    error, elapsed = asyncio.run(run())
    assert error.code == "TQX_HOST_RETRY_EXHAUSTED"
    assert elapsed < 1.5


def test_a_forked_child_runs_async_calls_on_its_own_connections(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    upstream.delay_s = 0.0
    runtime = runtime_for(upstream.base_url)

    async def call(text: str) -> object:
        return (await runtime.aexecute(saying(greeting_request, text))).output

    assert asyncio.run(call("parent")) == {"greeting": "parent"}
    connections = upstream.connections
    _, child = run_in_child(lambda: asyncio.run(call("child")))
    assert child() == {"ok": {"greeting": "child"}}
    assert upstream.connections == connections + 1  # the child's own connection
    runtime.close()


def test_the_langfuse_runtime_passes_the_async_conformance_checks(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest
) -> None:
    with slow_upstream(30.0) as hanging:
        runtime = runtime_for(model_server.base_url)
        failing = runtime_for(f"http://127.0.0.1:{closed_port()}/v1")
        cancelled = runtime_for(hanging.base_url)
        check_streaming_parity(runtime, greeting_request, asynchronous=True)
        # Generous: the suite shares two cores with its own servers (0.43 s seen in CI).
        check_concurrent_use(
            runtime, greeting_request, tasks=50, max_stall_s=1.5, asynchronous=True
        )
        check_failure_projection(failing, greeting_request, asynchronous=True)
        check_cancellation(
            cancelled,
            greeting_request,
            connection_released=lambda: hanging.closed >= 1,
            cancel_after_s=0.3,
            asynchronous=True,
        )
        for each in (runtime, failing, cancelled):
            each.close()


def test_a_runtime_outliving_its_event_loops_keeps_no_sockets_of_theirs(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    """``asyncio.run(runtime.aexecute(...))`` per job: each closed loop's pool is dropped
    when the next loop comes, so its socket closes (it used to stay open until close())."""
    upstream.delay_s = 0.0
    runtime = runtime_for(upstream.base_url)
    for _ in range(30):
        asyncio.run(runtime.aexecute(greeting_request))
    gc.collect()
    deadline = time.monotonic() + 5
    while upstream.connections - upstream.closed > 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert upstream.connections - upstream.closed <= 2  # the last loop's, at most
    runtime.close()


def test_a_lent_async_transport_serves_one_live_event_loop(
    upstream: Upstream, greeting_request: ExecutionRequest
) -> None:
    upstream.delay_s = 0.0
    lent = AsyncDeadlineTransport()
    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url=upstream.base_url, api_key=MODEL_KEY, model="m"),
        async_transport=lent,
    )
    for _ in range(3):  # one loop after another: the pool follows the live one
        assert asyncio.run(runtime.aexecute(greeting_request)).output
    started = threading.Event()
    release = threading.Event()

    async def hold_the_pool() -> None:
        await runtime.aexecute(greeting_request)
        started.set()
        while not release.is_set():
            await asyncio.sleep(0.01)

    holder = threading.Thread(target=lambda: asyncio.run(hold_the_pool()))
    holder.start()
    assert started.wait(10)
    try:
        with pytest.raises(PortError) as raised:
            asyncio.run(runtime.aexecute(greeting_request))
        assert raised.value.code == "TQX_DATA_INVALID"
        assert "another event loop" in str(raised.value)
    finally:
        release.set()
        holder.join(10)
    runtime.close()
