"""The export path loses only what it must, against a loopback Langfuse that misbehaves.

Each test drives a real ``ExportPipeline`` (OTel's provider, batch processor and OTLP
exporter) over real sockets: a stand-in that answers 503/429 or resets once, refuses
bodies over a size with 413, streams an endless body or hangs.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_core import ExecutionRequest, InvalidData, codes
from templiqx_langfuse import LangfuseConfig, trace_attributes
from templiqx_langfuse._export import ExportPipeline
from tests.conftest import PUBLIC_KEY, SECRET_KEY, RuntimeFactory, closed_port
from tests.loopback import Reply, ServerRequest
from tests.otlp_receiver import LoopbackOtlpReceiver, attributes_of

TRACES = "/api/public/otel/v1/traces"
Before = Callable[[ServerRequest], Reply | None]


class MisbehavingReceiver(LoopbackOtlpReceiver):
    """The OTLP stand-in, with ``before`` deciding first (``None``: answer normally)."""

    def __init__(self, before: Before, port: int = 0) -> None:
        super().__init__("ok", port=port)
        self.before = before

    def _respond(self, request: ServerRequest) -> Reply:
        return self.before(request) or super()._respond(request)


@contextmanager
def receiver(before: Before) -> Iterator[MisbehavingReceiver]:
    server = MisbehavingReceiver(before)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def pipeline(
    base_url: str, *, flush_timeout_s: float = 5.0, timeout_s: float = 5.0
) -> ExportPipeline:
    config = LangfuseConfig(
        public_key=PUBLIC_KEY,
        secret_key=SECRET_KEY,
        base_url=base_url,
        flush_timeout_s=flush_timeout_s,
        timeout_s=timeout_s,
    )
    return ExportPipeline(config, span_exporter=None)


def generation(export: ExportPipeline, n: int, **attributes: Any) -> None:
    """One generation ``gen-n`` and its score, queued as a runtime queues them."""
    span = export.tracer.start_span(f"gen-{n}", attributes={"n": str(n), **attributes})
    context = span.get_span_context()
    export.score(
        context.span_id,
        {
            "id": f"s{n}",
            "traceId": f"{context.trace_id:032x}",
            "observationId": f"{context.span_id:016x}",
            "name": "v",
        },
    )
    span.end()


def submit(export: ExportPipeline, count: int, **attributes: Any) -> None:
    for n in range(1, count + 1):
        generation(export, n, **attributes)


def export_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("OtelBatchSpan")]


def first_only(reply: Reply, path: str = TRACES) -> Before:
    """Misbehave with ``reply`` on the first request to ``path``, then answer normally."""
    seen = threading.Event()

    def before(request: ServerRequest) -> Reply | None:
        if request.path == path and not seen.is_set():
            seen.set()
            return reply
        return None

    return before


@pytest.mark.parametrize(
    "failure",
    [Reply(status=503), Reply(status=429, headers={"retry-after": "0"}), Reply(status=502)],
    ids=["503", "429-retry-after", "502"],
)
def test_one_failed_send_is_retried_and_every_generation_arrives(failure: Reply) -> None:
    with receiver(first_only(failure)) as server:
        export = pipeline(server.base_url)
        submit(export, 100)
        export.close()
        assert len(server.span_names()) == 100
        assert len(server.scores) == 100
        assert export.delivery.dropped == 0
        assert [r.path for r in server.requests].count(TRACES) == 2  # the failure, the retry


def test_a_refused_connection_is_retried_until_langfuse_is_back() -> None:
    port = closed_port()
    export = pipeline(f"http://127.0.0.1:{port}")
    submit(export, 30)
    time.sleep(0.35)  # the first attempt was refused: nothing listened
    server = MisbehavingReceiver(lambda request: None, port).start()
    try:
        export.close()
        assert len(server.span_names()) == 30
        assert export.delivery.dropped == 0
    finally:
        server.stop()


def test_close_right_after_a_failure_still_delivers_within_the_flush_timeout() -> None:
    """close() waits out the exporter's retry pause (about a second), not longer."""
    with receiver(first_only(Reply(status=503))) as server:
        export = pipeline(server.base_url, flush_timeout_s=2.0)
        submit(export, 100)
        for _ in range(200):  # until the first (refused) send happened
            if server.requests:
                break
            time.sleep(0.01)
        started = time.monotonic()
        export.close()
        took = time.monotonic() - started
    assert len(server.span_names()) == 100
    assert took < 2.0, f"close() took {took:.2f} s"


def test_retries_are_bounded_by_the_timeout_then_that_batch_alone_is_dropped() -> None:
    with receiver(lambda request: Reply(status=503)) as server:
        export = pipeline(server.base_url, timeout_s=2.5)
        submit(export, 10)
        started = time.monotonic()
        export.close()
        took = time.monotonic() - started
        assert [r.path for r in server.requests].count(TRACES) == 2  # at 0 s and ~1 s
        assert export.delivery.dropped == 10
        assert export.scores.dropped == 10
        assert server.scores == []
    assert took < 2.5 + 1.0


def too_large_over(limit: int) -> Before:
    """A Langfuse ingress that refuses trace bodies over ``limit`` bytes with 413."""

    def before(request: ServerRequest) -> Reply | None:
        if request.path == TRACES and len(gzip.decompress(request.body)) > limit:
            return Reply(status=413, body=b"Request Entity Too Large")
        return None

    return before


def test_an_oversized_generation_is_dropped_alone_with_its_score(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with receiver(too_large_over(256 * 1024)) as server:
        export = pipeline(server.base_url)
        submit(export, 40)
        generation(export, 41, output="x" * 300_000)  # alone over the limit
        submit(export, 40)  # names 1..40 again: a second batch behind it
        with caplog.at_level(logging.WARNING, logger="templiqx_langfuse"):
            export.close()
        names = server.span_names()
        observed = {s["observationId"] for s in server.scores}
    assert len(names) == 80
    assert "gen-41" not in names
    assert f"{41:016x}" not in observed, "a score points at an observation never sent"
    assert len(server.scores) == 80
    assert export.delivery.dropped == 1
    assert export.scores.dropped == 1
    ours = [r for r in caplog.records if r.name == "templiqx_langfuse"]
    lines = [r.getMessage() for r in ours if "413" in r.getMessage()]
    assert len(lines) == 1, lines


def test_a_value_that_cannot_be_encoded_is_sanitised_in_its_item_alone() -> None:
    with receiver(lambda request: None) as server:
        export = pipeline(server.base_url)
        submit(export, 9)
        generation(export, 10, user="ab\ud800cd")  # a lone surrogate
        export.close()
        spans = {span.name: attributes_of(span) for span in server.spans}
    assert len(spans) == 10
    assert spans["gen-10"]["user"] == "ab?cd"


@pytest.mark.parametrize("field", ["release", "session_id", "user_id", "tags"])
def test_configuration_that_could_never_be_sent_is_refused_at_construction(field: str) -> None:
    value: Any = ("ok", "x\udc00") if field == "tags" else "x\udc00"
    with pytest.raises(InvalidData) as caught:
        LangfuseConfig(public_key=PUBLIC_KEY, secret_key=SECRET_KEY, **{field: value})
    assert caught.value.code == codes.DATA_INVALID
    assert field in str(caught.value)


ENDLESS = 4096  # pieces of 64 KiB: a 256 MiB body, if anyone read it


def test_an_endless_response_body_costs_no_memory_and_close_is_bounded() -> None:
    piece = b"x" * 65536
    endless = Reply(status=200, pieces=(piece,) * ENDLESS)
    with receiver(lambda request: endless) as server:
        export = pipeline(server.base_url, flush_timeout_s=2.0)
        tracemalloc.start()
        try:
            submit(export, 50)
            started = time.monotonic()
            export.close()
            took = time.monotonic() - started
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        sent = server.bytes_sent
    assert peak < 8 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB while reading the answer"
    assert sent < len(piece) * ENDLESS // 4, f"the server got to send {sent} bytes"
    assert took < 3.0
    assert export.delivery.dropped == 0  # the 200 counts: the body is not needed


def test_close_is_bounded_and_the_export_thread_ends_against_a_hanging_langfuse() -> None:
    """close() returns at the flush deadline; the request in flight then ends at its own
    timeout (``timeout_s``), and the thread with it."""
    before = len(export_threads())
    with receiver(lambda request: Reply(hang_s=30.0)) as server:
        export = pipeline(server.base_url, flush_timeout_s=1.0, timeout_s=1.5)
        submit(export, 20)
        time.sleep(0.3)  # the first send is in flight, hanging
        started = time.monotonic()
        export.close()
        took = time.monotonic() - started
        deadline = time.monotonic() + 3.0
        while len(export_threads()) > before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(export_threads()) <= before, "the export thread outlived its timeout"
    assert took < 1.0 + 0.5, f"close() took {took:.2f} s"
    assert export.delivery.dropped == 20


def test_a_user_id_that_cannot_be_encoded_costs_only_itself_end_to_end(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with receiver(lambda request: None) as server:
        runtime = make_runtime(langfuse_base_url=server.base_url, span_exporter=None)
        for _ in range(5):
            runtime.execute(greeting_request)
        with trace_attributes(user_id="user-\ud800"):
            runtime.execute(greeting_request)
        runtime.close()
        users = [attributes_of(span).get(A.TRACE_USER_ID) for span in server.spans]
    assert len(users) == 6  # before: the whole batch failed to encode, 0 arrived
    assert "user-?" in users
