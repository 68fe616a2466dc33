"""The adapter-owned export path to Langfuse: cheap on the caller's thread, quiet in an outage.

The caller's thread only appends a finished generation (ids, times, a dict of the
documented Langfuse attributes) to a bounded queue. One worker thread per runtime,
started on first use, batches them, encodes a batch as OTLP/JSON with one orjson call
(the server reads OTLP/JSON and protobuf alike, ``traces/index.ts``) and posts it with
gzip; scores go to the ingestion API the same way. No OTel span objects, no per-attribute
validation, no media scan of JSON text, no protobuf message per attribute: that was most
of what tracing cost (see bench/README.md). A host that passes its own ``SpanExporter``
gets ``ReadableSpan`` objects built in the worker instead.

A circuit breaker in front of each channel turns a failing Langfuse into a quick, quiet
drop: after a failed send, batches are discarded without I/O for a cool-down period
(counted, and reported once), then one send probes again.

Nothing is shared between runtimes (the SDK keeps one client per public key; this path
does not), closing releases the thread, the sockets and the exit hook, and a forked child
starts afresh instead of touching its parent's connections or queue.
"""

from __future__ import annotations

import atexit
import base64
import functools
import gzip
import http.client
import logging
import os
import random
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Generic, TypeVar
from urllib.parse import urlsplit

import httpx
import orjson
from langfuse import __version__ as SDK_VERSION  # the SDK whose scope and headers we send
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import SpanContext, SpanKind, Status, StatusCode, TraceFlags

from ._config import LangfuseConfig

__all__ = ["CircuitBreaker", "ExportPipeline", "FinishedGeneration"]

logger = logging.getLogger("templiqx_langfuse")

OTLP_TRACES_PATH = "/api/public/otel/v1/traces"
INGESTION_PATH = "/api/public/ingestion"
EXPORT_TIMEOUT_S = 3.0
COOL_DOWN_S = 30.0
MAX_QUEUE = 10_000  # generations (and scores) waiting; beyond this they are dropped, counted
MAX_BATCH = 512
#: Scores (for dashboards, not debugging) ride along with span batches once this many wait,
#: or when the flush interval passes quietly: one request fewer per span batch.
SCORE_BATCH = 64
#: The server maps spans of scopes starting with this as Langfuse SDK spans
#: (``isLangfuseSDKSpans``): the attributes are read as Langfuse attributes, not copied
#: into metadata. It is the SDK's tracer name, sent with the SDK's version.
SCOPE_NAME = "langfuse-sdk"


@dataclass(slots=True)
class FinishedGeneration:
    """One ended generation: what the caller's thread hands to the export path."""

    trace_id: int
    span_id: int
    parent_span_id: int | None
    name: str
    start_ns: int
    end_ns: int
    attributes: dict[str, Any]
    error: str | None = None  # the status message of an ERROR status


Item = TypeVar("Item")


class CircuitBreaker(Generic[Item]):
    """Wraps a batch sender; after a failure, drops batches without I/O for ``cool_down_s``."""

    def __init__(
        self,
        send: Callable[[Sequence[Item]], bool],
        *,
        what: str = "traces",
        cool_down_s: float = COOL_DOWN_S,
    ) -> None:
        self.send = send
        self.what = what
        self.cool_down_s = cool_down_s
        self.dropped = 0
        self.exported = 0
        self._open_until = 0.0
        self._warned = False

    def __call__(self, batch: Sequence[Item]) -> bool:
        if time.monotonic() < self._open_until:
            self.dropped += len(batch)
            return False
        try:
            ok = self.send(batch)
        except Exception:
            ok = False
        if ok:
            self.exported += len(batch)
            self._open_until = 0.0
            return True
        self.dropped += len(batch)
        self._open_until = time.monotonic() + self.cool_down_s
        if not self._warned:
            self._warned = True
            logger.warning(
                "Langfuse export of %s failed; dropping them for %.0f s before retrying "
                "(executions are unaffected)",
                self.what,
                self.cool_down_s,
            )
        return False


def _any_value(value: Any) -> dict[str, Any]:
    """OTLP/JSON ``AnyValue`` (int64 as a decimal string, as the spec and the server say)."""
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, bool):
        return {"boolValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, (list, tuple)):
        return {"arrayValue": {"values": [_any_value(item) for item in value]}}
    return {"stringValue": str(value)}


def _key_values(attributes: dict[str, Any]) -> list[dict[str, Any]]:
    # Most values are strings (JSON text, names): the fast path skips the type dispatch.
    return [
        {"key": key, "value": {"stringValue": value} if type(value) is str else _any_value(value)}
        for key, value in attributes.items()
    ]


def _otlp_span(generation: FinishedGeneration) -> dict[str, Any]:
    span: dict[str, Any] = {
        "traceId": f"{generation.trace_id:032x}",
        "spanId": f"{generation.span_id:016x}",
        "name": generation.name,
        "kind": 1,  # SPAN_KIND_INTERNAL, as the SDK's observations
        "startTimeUnixNano": str(generation.start_ns),
        "endTimeUnixNano": str(generation.end_ns),
        "attributes": _key_values(generation.attributes),
    }
    if generation.parent_span_id is not None:
        span["parentSpanId"] = f"{generation.parent_span_id:016x}"
    if generation.error is not None:
        span["status"] = {"code": 2, "message": generation.error}
    return span


class _Identity:
    """Resource and scope, as the SDK's own spans carry them (computed once)."""

    def __init__(self, public_key: str) -> None:
        self.resource = Resource.create()
        self.scope = InstrumentationScope(SCOPE_NAME, SDK_VERSION, None, {"public_key": public_key})
        self.resource_json = {"attributes": _key_values(dict(self.resource.attributes))}
        self.scope_json = {
            "name": SCOPE_NAME,
            "version": SDK_VERSION,
            "attributes": _key_values({"public_key": public_key}),
        }

    def otlp_json(self, batch: Sequence[FinishedGeneration]) -> bytes:
        return orjson.dumps(
            {
                "resourceSpans": [
                    {
                        "resource": self.resource_json,
                        "scopeSpans": [
                            {"scope": self.scope_json, "spans": [_otlp_span(g) for g in batch]}
                        ],
                    }
                ]
            }
        )

    def readable(self, generation: FinishedGeneration) -> ReadableSpan:
        sampled = TraceFlags(TraceFlags.SAMPLED)
        parent = (
            SpanContext(generation.trace_id, generation.parent_span_id, False, sampled)
            if generation.parent_span_id is not None
            else None
        )
        status = (
            Status(StatusCode.ERROR, generation.error)
            if generation.error is not None
            else Status(StatusCode.UNSET)
        )
        return ReadableSpan(
            name=generation.name,
            context=SpanContext(generation.trace_id, generation.span_id, False, sampled),
            parent=parent,
            resource=self.resource,
            attributes=generation.attributes,
            kind=SpanKind.INTERNAL,
            status=status,
            start_time=generation.start_ns,
            end_time=generation.end_ns,
            instrumentation_scope=self.scope,
        )


class _Poster:
    """POSTs to one Langfuse base URL over a kept-alive ``http.client`` connection.

    The export thread's only HTTP: a few hundred bytes of headers and a gzipped body per
    batch. ``http.client`` does that with a fraction of httpx's per-request Python work
    (header models, h11 events), and the export thread holds the GIL for less of it.
    """

    def __init__(self, base_url: str, timeout_s: float) -> None:
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._timeout_s = timeout_s
        self._connection: http.client.HTTPConnection | None = None

    def _connect(self) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=self._timeout_s, context=_tls_context()
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=self._timeout_s)

    def post(self, path: str, body: bytes, headers: dict[str, str]) -> int:
        """The response status; an error on a reused connection reconnects once."""
        for attempt in (1, 2):
            reused = self._connection is not None
            connection = self._connection or self._connect()
            self._connection = connection
            try:
                connection.request("POST", self._prefix + path, body=body, headers=headers)
                response = connection.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                self.close()
                if reused and attempt == 1:
                    continue  # the server closed an idle kept-alive connection
                raise
            if response.will_close:
                self.close()
            return response.status
        raise AssertionError("unreachable")  # pragma: no cover

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


@functools.cache
def _tls_context() -> ssl.SSLContext:
    """One verifying TLS context (httpx's default) for every export client: loading the
    CA store costs ~30 ms, far more than a runtime's whole export path otherwise."""
    return httpx.create_ssl_context()


def _score_events(batch: Sequence[dict[str, Any]]) -> bytes:
    """An ingestion batch of ``score-create`` events (the envelope id is random, the
    timestamp the batch's: the score's own id is what identifies it)."""
    timestamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
    events = [
        {
            "id": f"{random.getrandbits(128):032x}",
            "type": "score-create",
            "timestamp": timestamp,
            "body": score,
        }
        for score in batch
    ]
    return orjson.dumps({"batch": events})


class ExportPipeline:
    """The queue, the worker thread and the senders of one runtime's traces and scores."""

    def __init__(self, config: LangfuseConfig, *, span_exporter: SpanExporter | None) -> None:
        self.config = config
        self._identity = _Identity(str(config.public_key))
        self._span_exporter = span_exporter
        token = f"{config.public_key}:{config.secret_key}".encode()
        self._headers = {
            "authorization": "Basic " + base64.b64encode(token).decode("ascii"),
            "x-langfuse-sdk-name": "python",
            "x-langfuse-sdk-version": SDK_VERSION,
            "x-langfuse-public-key": str(config.public_key),
            "x-langfuse-ingestion-version": "4",
            "content-encoding": "gzip",
        }
        self.spans = CircuitBreaker[FinishedGeneration](self._send_spans, what="traces")
        self.scores = CircuitBreaker[dict[str, Any]](self._send_scores, what="scores")
        self.dropped_full = 0
        self._interval = config.flush_interval_s
        self._flush_at = config.flush_at
        self._lock = threading.Lock()
        self._closed = False
        self._reset()

    def _reset(self) -> None:
        """Fresh state for this process (at construction, and in a forked child)."""
        self._pid = os.getpid()
        self._queue: deque[FinishedGeneration] = deque()
        self._score_queue: deque[dict[str, Any]] = deque()
        self._wake = threading.Event()
        self._stop = False
        self._worker: threading.Thread | None = None
        self._http: _Poster | None = None

    # -- the caller's side: append, wake the worker when a batch is due -------------

    def submit(self, generation: FinishedGeneration) -> None:
        self._enqueue(self._queue, generation)

    def submit_score(self, score: dict[str, Any]) -> None:
        self._enqueue(self._score_queue, score)

    def _enqueue(self, queue: deque[Any], item: Any) -> None:
        if self._worker is None or self._pid != os.getpid():
            if not self._start():
                return
            queue = self._queue if isinstance(item, FinishedGeneration) else self._score_queue
        if len(queue) >= MAX_QUEUE:
            self.dropped_full += 1
            return
        queue.append(item)
        if len(queue) >= self._flush_at and queue is self._queue:
            self._wake.set()  # scores ride along with the spans' batches

    def _start(self) -> bool:
        with self._lock:
            if self._closed:
                return False
            if self._pid != os.getpid():
                self._reset()  # a forked child: the parent's thread and sockets are not ours
            if self._worker is None:
                self._worker = threading.Thread(
                    target=self._run, name="templiqx-langfuse-export", daemon=True
                )
                self._worker.start()
                atexit.register(self._at_exit)
        return True

    # -- the worker: batch, encode, send ----------------------------------------------

    def _run(self) -> None:
        while True:
            quiet = not self._wake.wait(self._interval)  # the interval passed: flush all
            self._wake.clear()
            stop = self._stop
            try:
                self._drain(self._queue, self.spans)
                if quiet or stop or len(self._score_queue) >= SCORE_BATCH:
                    self._drain(self._score_queue, self.scores)
                if stop:
                    self._drain(self._queue, self.spans)  # what arrived meanwhile
                    self._drain(self._score_queue, self.scores)
            except Exception:  # the export thread must outlive any one bad batch
                logger.warning("Langfuse export: a batch was dropped", exc_info=False)
            if stop:
                return

    @staticmethod
    def _drain(queue: deque[Item], send: CircuitBreaker[Item]) -> None:
        """Send what is queued now, in as few batches as the size bound allows: chasing
        items that arrive meanwhile would send a trickle of one-span batches."""
        pending = len(queue)
        while pending > 0:
            batch = [queue.popleft() for _ in range(min(pending, MAX_BATCH))]
            pending -= len(batch)
            send(batch)

    def _post(self, path: str, body: bytes, content_type: str) -> bool:
        if self._http is None:
            timeout_s = min(EXPORT_TIMEOUT_S, self.config.flush_timeout_s + 0.5)
            self._http = _Poster(self.config.base_url, timeout_s)
        headers = {**self._headers, "content-type": content_type}
        status = self._http.post(path, gzip.compress(body, compresslevel=1), headers)
        return 200 <= status < 300

    def _send_spans(self, batch: Sequence[FinishedGeneration]) -> bool:
        if self._span_exporter is not None:
            readable = [self._identity.readable(g) for g in batch]
            return self._span_exporter.export(readable) is SpanExportResult.SUCCESS
        return self._post(OTLP_TRACES_PATH, self._identity.otlp_json(batch), "application/json")

    def _send_scores(self, batch: Sequence[dict[str, Any]]) -> bool:
        return self._post(INGESTION_PATH, _score_events(batch), "application/json")

    # -- closing: bounded, releases thread, sockets and exit hook -----------------------

    def close(self) -> None:
        """Send what is queued within ``flush_timeout_s``, then release everything."""
        atexit.unregister(self._at_exit)
        self._close()

    def _close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            worker = self._worker if self._pid == os.getpid() else None
        if worker is not None:
            self._stop = True
            self._wake.set()
            worker.join(self.config.flush_timeout_s)
            if worker.is_alive():
                logger.warning(
                    "Langfuse flush did not finish within %.1f s; pending traces dropped",
                    self.config.flush_timeout_s,
                )
        if self._http is not None:
            self._http.close()
        if self._span_exporter is not None:
            try:
                self._span_exporter.force_flush(int(self.config.flush_timeout_s * 1000))
            except Exception:  # a host exporter's flush failure is not the caller's
                logger.warning("Langfuse span exporter flush failed", exc_info=False)

    def _at_exit(self) -> None:
        """A process that never called close(): send what is queued, bounded."""
        self._close()
