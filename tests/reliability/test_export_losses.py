"""The export path loses only what it must, against a loopback Langfuse that misbehaves.

Each test drives a real ``ExportPipeline`` (OTel's provider, batch processor and OTLP
exporter) over real sockets: a stand-in that answers 503/429 or resets once, streams an
endless body or hangs; and big generations and bursts that must all arrive.
"""

from __future__ import annotations

import gzip
import json
import logging
import os
import threading
import time
import tracemalloc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_core import ExecutionRequest, InvalidData, codes
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig, trace_attributes
from templiqx_langfuse._export import (
    MAX_BATCH_BYTES,
    MAX_JSON_BYTES,
    SCORE_ATTRIBUTE,
    ExportPipeline,
    bounded,
)
from tests.conftest import PUBLIC_KEY, SECRET_KEY, RuntimeFactory, closed_port
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)
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
    base_url: str, *, flush_timeout_s: float = 5.0, timeout_s: float = 5.0, **options: Any
) -> ExportPipeline:
    config = LangfuseConfig(
        public_key=PUBLIC_KEY,
        secret_key=SECRET_KEY,
        base_url=base_url,
        flush_timeout_s=flush_timeout_s,
        timeout_s=timeout_s,
        **options,
    )
    return ExportPipeline(config, span_exporter=None)


def generation(export: ExportPipeline, n: int, **attributes: Any) -> None:
    """One generation ``gen-n`` carrying its score, as a runtime ends one."""
    fields = {"n": str(n), SCORE_ATTRIBUTE: True, **attributes}
    export.tracer.start_span(f"gen-{n}", attributes=bounded(fields)).end()


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
        # Backoffs are 1 s then 2 s, each jittered by up to 20 %: within 2 s exactly one
        # retry fits (at 2.5 s a second one sometimes did).
        export = pipeline(server.base_url, timeout_s=2.0)
        submit(export, 10)
        started = time.monotonic()
        export.close()
        took = time.monotonic() - started
        assert [r.path for r in server.requests].count(TRACES) == 2  # at 0 s and ~1 s
        assert export.delivery.dropped == 10
        assert server.scores == []  # a score never points at a generation never sent
    assert took < 2.0 + 1.0


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


def test_a_redirect_is_not_followed_nor_its_body_read() -> None:
    paths: list[str] = []
    moved = Reply(status=307, headers={"location": "/elsewhere"}, pieces=(b"x" * 65536,) * ENDLESS)

    def before(request: ServerRequest) -> Reply:
        paths.append(request.path)
        return moved

    with receiver(before) as server:
        export = pipeline(server.base_url, flush_timeout_s=2.0)
        submit(export, 1)
        export.close()
        sent = server.bytes_sent
    assert "/elsewhere" not in paths, paths  # neither the export nor the score follows it
    assert sent < 8 * 2**20, f"the server got to send {sent} bytes"


def test_a_forked_child_exports_on_connections_of_its_own() -> None:
    ports: list[int] = []

    def record(request: ServerRequest) -> None:
        ports.append(request.peer_port)

    with receiver(record) as server:
        export = pipeline(server.base_url)
        generation(export, 1)
        export.provider.force_flush()  # the span, then its score: two pooled connections
        parents = set(ports)
        child = os.fork()
        if child == 0:  # the child's first generation adopts the pipeline, as open_generation
            export.adopt()
            generation(export, 2)
            os._exit(0 if export.provider.force_flush() else 1)
        assert os.waitpid(child, 0)[1] == 0
        export.close()
    assert len(parents) == 2
    assert not parents & set(ports[len(parents) :]), ports  # a shared socket mixes answers


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


def trace_bodies(server: LoopbackOtlpReceiver) -> list[bytes]:
    return [gzip.decompress(r.body) for r in server.requests if r.path == TRACES]


def test_forty_generations_near_the_response_bound_all_arrive_in_bounded_batches(
    greeting_request: ExecutionRequest, model_server: LoopbackModelServer
) -> None:
    """Before: one batch of 77.9 MB, over the exporter's 64 MiB: 0 of 40 arrived."""
    answer = "x" * 1_900_000
    body = chat_completion({"greeting": answer})
    model_server.set_responder(lambda request: json_reply(body))
    with receiver(lambda request: None) as server:
        runtime = LangfuseTracedRuntime(
            ModelConfig(base_url=model_server.base_url, api_key="sk-model-0123", model="m"),
            LangfuseConfig(
                public_key=PUBLIC_KEY,
                secret_key=SECRET_KEY,
                base_url=server.base_url,
                flush_interval_s=60,  # all 40 queue for one export, as in the report
                flush_timeout_s=60,
            ),
        )
        for _ in range(40):
            runtime.execute(greeting_request)
        runtime.close()
        outputs = [attributes_of(span)[A.OBSERVATION_OUTPUT] for span in server.spans]
        sizes = [len(body) for body in trace_bodies(server)]
        scores = len(server.scores)
    assert len(outputs) == 40
    assert all(json.loads(output) == {"greeting": answer} for output in outputs)  # whole
    assert len(sizes) >= 5
    assert max(sizes) <= MAX_BATCH_BYTES + 64 * 1024, sizes
    assert scores == 40


def test_a_value_over_its_bound_is_truncated_visibly_and_its_neighbours_arrive() -> None:
    big = json.dumps({"text": "y" * 5_000_000})
    with receiver(lambda request: None) as server:
        export = pipeline(server.base_url)
        submit(export, 4)
        generation(
            export,
            5,
            **{
                A.OBSERVATION_OUTPUT: big,
                A.TRACE_USER_ID: "u" * 100_000,
                A.TRACE_TAGS: ["t" * 1000] * 1000,
            },
        )
        submit(export, 4)
        export.close()
        spans = {span.name: attributes_of(span) for span in server.spans}
    assert len(server.spans) == 9
    output = spans["gen-5"][A.OBSERVATION_OUTPUT]
    assert len(output.encode()) <= MAX_JSON_BYTES
    parsed = json.loads(output)  # still a JSON document, and says what happened
    assert "5000012 bytes" in parsed["templiqx_truncated"]
    assert big.startswith(parsed["head"])
    user = spans["gen-5"][A.TRACE_USER_ID]
    assert user.startswith("uuu")
    assert user.endswith("bytes kept]")
    assert len(user) < 65 * 1024
    tags = spans["gen-5"][A.TRACE_TAGS]
    assert sum(map(len, tags)) < 65 * 1024
    assert tags[-1].startswith("[truncated by templiqx-langfuse:")


def test_a_burst_of_5000_generations_within_one_export_interval_all_arrive() -> None:
    with receiver(lambda request: None) as server:
        export = pipeline(server.base_url, flush_timeout_s=60, flush_interval_s=60)
        submit(export, 5000)
        export.close()
        assert len(server.span_names()) == 5000
        assert len(server.scores) == 5000
    assert export.delivery.dropped == 0


@pytest.mark.parametrize(
    "answer",
    [
        Reply(status=200, pieces=(b"x" * 65536,) * ENDLESS),
        Reply(status=500),
        Reply(status=207, body=b'{"accepted": 15, "rejected": 5, "errors": ["invalid"]}'),
    ],
    ids=["endless-body", "500", "207-some-rejected"],
)
def test_a_misbehaving_score_endpoint_costs_the_spans_nothing_and_no_memory(
    answer: Reply,
) -> None:
    """An answer's body is never needed: at most 64 KiB of it is read; a refused score is
    dropped alone, after its retries."""
    scores_path = "/api/public/scores"
    with receiver(lambda r: answer if r.path == scores_path else None) as server:
        export = pipeline(server.base_url, flush_timeout_s=10.0)
        tracemalloc.start()
        try:
            submit(export, 20)
            export.close()
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert len(server.span_names()) == 20
        assert any(r.path == scores_path for r in server.requests)
    assert peak < 8 * 1024 * 1024, f"peak {peak / 2**20:.1f} MiB"
    assert export.delivery.dropped == 0
    # A 200 accepted the scores, whatever its body; a 500 refused them all (after its
    # retries); a 207 names how many it rejected (not retried: the rest were taken).
    assert export.delivery.scores_dropped == {200: 0, 500: 20, 207: 5}[answer.status]


def test_a_retry_after_date_otel_cannot_read_drops_that_batch_without_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """OTel's exporter reads a 503's Retry-After itself; a year past C's long raised its
    OverflowError out of the export, logged with a traceback by the batch processor."""
    busy = Reply(status=503, headers={"retry-after": "Mon, 01 Jan 99999999999999999999 0:0:0 GMT"})
    with receiver(first_only(busy)) as server, caplog.at_level(logging.DEBUG):
        export = pipeline(server.base_url)
        submit(export, 1)
        export.close()
        submit_later = pipeline(server.base_url)  # Langfuse is back: the next batch arrives
        submit(submit_later, 1)
        submit_later.close()
        assert server.span_names() == ["gen-1"]
    assert export.delivery.dropped == 1
    assert not [r for r in caplog.records if r.exc_info is not None]
    assert any("the export raised OverflowError" in r.getMessage() for r in caplog.records)
