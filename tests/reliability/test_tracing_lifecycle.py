"""Runtimes come and go without losing spans or leaking threads, sockets or exit hooks.

Real parts only: the real langfuse SDK (a host's client beside the runtimes), real
loopback sockets for the model and for Langfuse (the loopback OTLP receiver).
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
import time
import weakref

import pytest
from langfuse import Langfuse

from templiqx_core import ExecutionRequest, PortError
from tests.conftest import RuntimeFactory
from tests.loopback import LoopbackModelServer, Reply
from tests.otlp_receiver import otlp_receiver


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def settle(predicate: object, timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.02)


def test_two_runtimes_with_one_public_key_lose_no_span(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    """Issue 12 item 8: the SDK keeps one client per public key; the adapter's own path
    shares nothing, so closing one runtime cannot cost another its spans."""
    with otlp_receiver("ok") as receiver:
        # A host's own SDK client with the same key, created first, as hosts do.
        host = Langfuse(
            public_key="pk-lf-one-project", secret_key="sk", base_url="http://127.0.0.1:9"
        )
        first, second = (
            make_runtime(
                public_key="pk-lf-one-project",
                langfuse_base_url=receiver.base_url,
                span_exporter=None,
            )
            for _ in range(2)
        )
        for _ in range(10):
            first.execute(greeting_request)
            second.execute(greeting_request)
        first.close()
        for _ in range(10):
            second.execute(greeting_request)  # after the first one is gone
        second.close()
        host.shutdown()
        assert receiver.span_names() == ["greeting"] * 30
        assert len(receiver.scores) == 30
        assert len({span.span_id for span in receiver.spans}) == 30  # each exactly once


@pytest.mark.slow
def test_create_execute_close_cycles_leave_nothing_behind(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    """Issue 12 item 9: traced create/execute/close cycles leave no thread, socket or
    exit hook behind (the SDK's prompt-cache consumer used to stay: a thread a cycle)."""
    with otlp_receiver("ok") as receiver:
        warm = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        warm.execute(greeting_request)
        warm.close()
        threads, fds = threading.active_count(), open_fds()
        pipelines = []
        for _ in range(60):
            runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
            pipelines.append(weakref.ref(runtime.tracing.pipeline))
            runtime.execute(greeting_request)
            runtime.close()
        settle(lambda: threading.active_count() <= threads)
        assert threading.active_count() <= threads, [t.name for t in threading.enumerate()]
        # Nothing holds a closed export path any more: no exit hook (atexit keeps what it
        # calls alive), no thread, no queue.
        gc.collect()
        assert [ref for ref in pipelines if ref() is not None] == []
        # Loopback server threads may still be closing their side; nothing of ours stays.
        settle(lambda: open_fds() <= fds + 2)
        assert open_fds() <= fds + 2
        assert len(receiver.spans) == 61


def test_a_runtime_that_never_traced_starts_no_thread(
    make_runtime: RuntimeFactory,
) -> None:
    threads = threading.active_count()
    for _ in range(50):
        make_runtime().close()
    assert threading.active_count() == threads


# Python >= 3.12 warns that forking a threaded process may deadlock: this test forks one
# on purpose (the loopback servers and the export thread are running).
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_exports_through_its_own_thread_and_sockets(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    """After ``os.fork`` the child never uses the parent's export thread, queue or
    connection: its generations arrive as its own, the parent's as the parent's."""
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        runtime.execute(greeting_request)  # the parent's export thread is running
        pid = os.fork()
        if pid == 0:  # the child: three executions, then close (flushes its own path)
            code = 1
            try:
                for _ in range(3):
                    runtime.execute(greeting_request)
                runtime.close()
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        runtime.execute(greeting_request)
        runtime.close()
        assert len(receiver.spans) == 5
        assert len({span.span_id for span in receiver.spans}) == 5


@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_a_forked_child_waits_for_none_of_its_parents_calls_in_flight(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    greeting_request: ExecutionRequest,
) -> None:
    """A call in flight in the parent does not exist in a child forked meanwhile: the child's
    ``close`` has nothing to wait for (it waited ``CLOSE_WAIT_S`` for it)."""
    runtime = make_runtime()
    model_server.set_responder(lambda request: Reply(hang_s=1.5))

    def parent_call() -> None:
        with contextlib.suppress(PortError):  # the hang outlasts no deadline; either is fine
            runtime.execute(greeting_request)

    in_flight = threading.Thread(target=parent_call, daemon=True)
    in_flight.start()
    settle(lambda: model_server.requests)  # the parent's call is in flight
    pid = os.fork()
    if pid == 0:  # the child: close at once
        code = 1
        try:
            started = time.monotonic()
            runtime.close()
            code = 0 if time.monotonic() - started < 1.0 else 2
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    in_flight.join(timeout=10)
