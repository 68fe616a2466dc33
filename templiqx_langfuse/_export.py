"""The adapter-owned export path to Langfuse: cheap on the caller's thread, loses only
what it must.

The caller's thread only appends a finished generation (ids, times, a dict of the
documented Langfuse attributes) to a bounded queue. One worker thread per runtime,
started on first use, batches them, encodes a batch as OTLP/JSON with one orjson call
(the server reads OTLP/JSON and protobuf alike, ``traces/index.ts``) and posts it with
gzip; scores go to the ingestion API the same way. No OTel span objects, no per-attribute
validation, no media scan of JSON text, no protobuf message per attribute: that was most
of what tracing cost (see bench/README.md). A host that passes its own ``SpanExporter``
gets ``ReadableSpan`` objects built in the worker instead.

What is lost, and only that (each counted; each cause logged once, an oversized item
once per item):

* an answer worth retrying (429, 408, 5xx, a timeout, a refused or reset connection) is
  retried with exponential backoff and jitter, as OTel's exporter does, within
  ``RetryPolicy``; only then is that one batch dropped and the next one tried afresh;
* a batch refused for its size (413) is split in halves and each half re-sent, down to a
  single generation, which alone is dropped — and its score with it, so Langfuse never
  holds a score pointing at an observation it will not receive;
* a value that cannot be encoded (a lone surrogate) is replaced by ``?`` in that one item;
* the queue is bounded (``MAX_QUEUE``): beyond it new items are dropped, the caller never
  waits.

``close()`` and the exit hook stop the worker and give what is queued one real attempt
within ``flush_timeout_s`` (a pause between retries is cut short, a request in flight is
aborted at the deadline), so the thread never outlives ``close()``. A response body is
read up to ``MAX_RESPONSE_BYTES``; more closes the connection (an endless body costs no
memory). A fork-started ``multiprocessing`` child flushes through
``multiprocessing.util.Finalize`` (it leaves through ``os._exit``, past ``atexit``), and
``LangfuseConfig(flush_on_sigterm=True)`` flushes on SIGTERM, then hands the signal to
the handler that was there before.

Nothing is shared between runtimes (the SDK keeps one client per public key; this path
does not), closing releases the thread, the sockets and the exit hooks, and a forked child
starts afresh instead of touching its parent's connections or queue.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import functools
import gzip
import http.client
import logging
import os
import random
import signal
import socket
import ssl
import sys
import threading
import time
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from types import FrameType
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
from ._version import __version__

__all__ = ["Channel", "ExportPipeline", "FinishedGeneration", "RetryPolicy"]

logger = logging.getLogger("templiqx_langfuse")

DISTRIBUTION = "templiqx-langfuse"
OTLP_TRACES_PATH = "/api/public/otel/v1/traces"
INGESTION_PATH = "/api/public/ingestion"
MAX_QUEUE = 10_000  # generations (and scores) waiting; beyond this they are dropped, counted
MAX_BATCH = 512
#: What is read of a Langfuse response (its body is never used): more closes the socket.
MAX_RESPONSE_BYTES = 64 * 1024
#: Ids of generations dropped, remembered so their scores are dropped too (bounded).
MAX_DROPPED_IDS = 10_000
#: Scores (for dashboards, not debugging) ride along with span batches once this many wait,
#: or when the flush interval passes quietly: one request fewer per span batch.
SCORE_BATCH = 64
#: The server maps spans of scopes starting with this as Langfuse SDK spans
#: (``isLangfuseSDKSpans``): the attributes are read as Langfuse attributes, not copied
#: into metadata. It is the SDK's tracer name, sent with the SDK's version.
SCOPE_NAME = "langfuse-sdk"
#: Answers worth another attempt: rate limiting, request timeout, the server's trouble.
RETRYABLE_STATUSES = frozenset({408, 429}) | frozenset(range(500, 600))


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How hard one batch is tried: ``attempts`` sends at most, pauses doubling from
    ``first_backoff_s`` up to ``max_backoff_s`` (with jitter, or the server's
    ``Retry-After`` when shorter than that), all within ``budget_s``."""

    attempts: int = 5
    first_backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    budget_s: float = 20.0

    def pause(self, attempt: int, retry_after_s: float | None) -> float:
        """The pause after the ``attempt``-th failed send (1-based)."""
        if retry_after_s is not None and 0 <= retry_after_s <= self.max_backoff_s:
            return retry_after_s
        ceiling = min(self.max_backoff_s, self.first_backoff_s * 2.0 ** (attempt - 1))
        return ceiling * (0.5 + random.random() / 2)  # jitter


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

# What a delivery came to, besides a reason to drop.
_SENT = "sent"
_TOO_LARGE = "too large"


def _sendable(value: Any) -> Any:
    """``value`` with every string made encodable: a lone surrogate (no UTF-8 encoder
    takes it) becomes ``?``; containers are rebuilt only around such strings."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-8", "replace").decode("utf-8")
        return value
    if isinstance(value, dict):
        return {_sendable(k): _sendable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_sendable(item) for item in value]
    return value


def _sendable_generation(generation: FinishedGeneration) -> FinishedGeneration:
    return replace(
        generation,
        name=_sendable(generation.name),
        attributes=_sendable(generation.attributes),
        error=_sendable(generation.error),
    )


def _no_body(batch: Sequence[Any]) -> bytes:
    """A host's exporter encodes spans itself: nothing to build here."""
    del batch
    return b""


class Channel(Generic[Item]):
    """One kind of item (traces or scores) on its way out: encodes a batch, isolating an
    item that cannot be encoded; delivers it; halves a batch refused for its size; drops
    (counting, logging once per cause) what cannot be delivered."""

    def __init__(
        self,
        what: str,
        encode: Callable[[Sequence[Item]], bytes],
        deliver: Callable[[bytes, Sequence[Item]], str],
        *,
        sanitize: Callable[[Item], Item],
        on_drop: Callable[[Sequence[Item]], None] = lambda _items: None,
    ) -> None:
        self.what = what
        self._encode, self._deliver = encode, deliver
        self._sanitize, self._on_drop = sanitize, on_drop
        self.exported = 0
        self.dropped = 0
        self._warned: set[str] = set()

    def __call__(self, batch: Sequence[Item]) -> bool:
        """Send ``batch``; True when all of it arrived."""
        pending: list[Sequence[Item]] = [batch]
        complete = True
        while pending:  # halving: at most 2 * len(batch) sends
            items = pending.pop()
            body, items = self._encoded(items)
            if not items:
                complete = False
                continue
            outcome = self._deliver(body, items)
            if outcome == _SENT:
                self.exported += len(items)
                self._warned.discard("outage")
            elif outcome == _TOO_LARGE and len(items) > 1:
                middle = len(items) // 2
                pending += [items[middle:], items[:middle]]
            elif outcome == _TOO_LARGE:
                complete = False
                self.drop(items, "it is larger than Langfuse accepts (HTTP 413)", once=False)
            else:
                complete = False
                self.drop(items, outcome, once=True)
        return complete

    def _encoded(self, items: Sequence[Item]) -> tuple[bytes, Sequence[Item]]:
        try:
            return self._encode(items), items
        except (TypeError, orjson.JSONEncodeError):
            pass
        kept: list[Item] = []
        for item in items:  # one by one: only the bad item changes
            try:
                self._encode([item])
                kept.append(item)
                continue
            except (TypeError, orjson.JSONEncodeError):
                cleaned = self._sanitize(item)
            try:
                self._encode([cleaned])
                kept.append(cleaned)
            except (TypeError, orjson.JSONEncodeError):
                self.drop([item], "it cannot be encoded as JSON", once=False)
        return (self._encode(kept) if kept else b""), kept

    def drop(self, items: Sequence[Item], why: str, *, once: bool) -> None:
        self.dropped += len(items)
        self._on_drop(items)
        key = "outage" if once else why
        if once and key in self._warned:
            return
        self._warned.add(key)
        logger.warning(
            "Langfuse export: dropped %d %s because %s (executions are unaffected)",
            len(items),
            self.what,
            why,
        )


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

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self._https = parts.scheme == "https"
        self._host = parts.hostname or ""
        self._port = parts.port
        self._prefix = parts.path.rstrip("/")
        self._connection: http.client.HTTPConnection | None = None

    def _connect(self, timeout_s: float) -> http.client.HTTPConnection:
        if self._https:
            return http.client.HTTPSConnection(
                self._host, self._port, timeout=timeout_s, context=_tls_context()
            )
        return http.client.HTTPConnection(self._host, self._port, timeout=timeout_s)

    def post(
        self, path: str, body: bytes, headers: dict[str, str], timeout_s: float
    ) -> tuple[int, float | None]:
        """The response status and its ``Retry-After`` seconds; an error on a reused
        connection reconnects once. The whole exchange ends within about ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        for attempt in (1, 2):
            reused = self._connection is not None
            connection = self._connection or self._connect(timeout_s)
            self._connection = connection
            connection.timeout = timeout_s
            if connection.sock is not None:
                connection.sock.settimeout(timeout_s)
            try:
                connection.request("POST", self._prefix + path, body=body, headers=headers)
                response = connection.getresponse()
                whole = self._read_bounded(response, deadline)
            except (OSError, http.client.HTTPException):
                self.close()
                if reused and attempt == 1:
                    continue  # the server closed an idle kept-alive connection
                raise
            if response.will_close or not whole:
                self.close()
            return response.status, _retry_after(response.getheader("retry-after"))
        raise AssertionError("unreachable")  # pragma: no cover

    @staticmethod
    def _read_bounded(response: http.client.HTTPResponse, deadline: float) -> bool:
        """Read and discard the body up to ``MAX_RESPONSE_BYTES`` and the deadline; whether
        it ended (else the connection cannot be reused)."""
        left = MAX_RESPONSE_BYTES
        while left > 0 and time.monotonic() < deadline:
            chunk = response.read1(min(left, 16 * 1024))
            if not chunk:
                response.read()  # marks it done, so the connection takes the next request
                return True
            left -= len(chunk)
        return response.isclosed()

    def abort(self) -> None:
        """Break off a request in flight from another thread (its recv returns at once)."""
        connection = self._connection
        sock = connection.sock if connection is not None else None
        if sock is not None:
            with contextlib.suppress(OSError):  # already closed by the worker
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()


def _retry_after(value: str | None) -> float | None:
    """``Retry-After`` in seconds (the HTTP-date form is not worth parsing here)."""
    if value is None or not value.strip().isdigit():
        return None
    return float(value.strip())


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

    def __init__(
        self,
        config: LangfuseConfig,
        *,
        span_exporter: SpanExporter | None,
        retry: RetryPolicy | None = None,
    ) -> None:
        self.config = config
        self.retry = retry or RetryPolicy()
        self._identity = _Identity(str(config.public_key))
        self._span_exporter = span_exporter
        token = f"{config.public_key}:{config.secret_key}".encode()
        self._headers = {
            "authorization": "Basic " + base64.b64encode(token).decode("ascii"),
            # Who sends this (the server attributes ingestion by it): this package, not
            # the langfuse SDK whose span scope the server's mapping keys on.
            "x-langfuse-sdk-name": DISTRIBUTION,
            "x-langfuse-sdk-version": __version__,
            "x-langfuse-public-key": str(config.public_key),
            "x-langfuse-ingestion-version": "4",
            "content-encoding": "gzip",
            "content-type": "application/json",
        }
        self._dropped_ids: OrderedDict[str, None] = OrderedDict()
        self.spans = Channel[FinishedGeneration](
            "traces",
            self._identity.otlp_json if span_exporter is None else _no_body,
            functools.partial(self._deliver, OTLP_TRACES_PATH)
            if span_exporter is None
            else self._deliver_to_host,
            sanitize=_sendable_generation,
            on_drop=self._forget_scores_of,
        )
        self.scores = Channel[dict[str, Any]](
            "scores",
            _score_events,
            functools.partial(self._deliver, INGESTION_PATH),
            sanitize=_sendable,
        )
        self.dropped_full = 0
        self._interval = config.flush_interval_s
        self._flush_at = config.flush_at
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer: Any = None
        if config.flush_on_sigterm:
            _install_sigterm_flush()
        self._reset()

    def _reset(self) -> None:
        """Fresh state for this process (at construction, and in a forked child)."""
        self._pid = os.getpid()
        self._queue: deque[FinishedGeneration] = deque()
        self._score_queue: deque[dict[str, Any]] = deque()
        self._wake = threading.Event()
        self._stopping = threading.Event()  # cuts a pause between retries short
        self._stop = False
        self._closing: threading.Thread | None = None  # the worker a close is flushing
        self._deadline = float("inf")
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
                self._register_process_exit()
                if self.config.flush_on_sigterm:
                    _LIVE.add(self)
        return True

    def _register_process_exit(self) -> None:
        """A ``multiprocessing`` child (fork or not) ends in ``os._exit``, past ``atexit``:
        its own finalizers are the one exit hook it runs. Only looked up when that module
        is loaded: a process without multiprocessing has no such children to serve."""
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            self._finalizer = util.Finalize(None, self._at_exit, exitpriority=10)

    # -- the worker: batch, encode, send ----------------------------------------------

    def _run(self) -> None:
        # A process signal sent to this thread would wait for the main thread to run Python
        # code again (it may block for good, as an idle Pool worker does): leave them to it.
        if hasattr(signal, "pthread_sigmask"):  # POSIX only
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
        while True:
            quiet = not self._wake.wait(self._interval)  # the interval passed: flush all
            self._wake.clear()
            stop = self._stop
            try:
                # Counted before the spans are sent: every score counted then belongs to a
                # generation already queued, whose fate is known when the score goes out.
                due = len(self._score_queue)
                if not (quiet or stop or due >= SCORE_BATCH):
                    due = 0
                self._drain(self._queue, self.spans, len(self._queue))
                keep = self._without_dropped_observations
                self._drain(self._score_queue, self.scores, due, keep)
                if stop:
                    self._drain(self._queue, self.spans, len(self._queue))  # arrived meanwhile
                    self._drain(self._score_queue, self.scores, len(self._score_queue), keep)
            except Exception:  # the export thread must outlive any one bad batch
                logger.warning("Langfuse export: a batch was dropped", exc_info=False)
            if stop:
                return

    @staticmethod
    def _drain(
        queue: deque[Item],
        send: Channel[Item],
        pending: int,
        keep: Callable[[list[Item]], list[Item]] | None = None,
    ) -> None:
        """Send ``pending`` queued items, in as few batches as the size bound allows:
        chasing items that arrive meanwhile would send a trickle of one-span batches."""
        while pending > 0:
            batch = [queue.popleft() for _ in range(min(pending, MAX_BATCH))]
            pending -= len(batch)
            if keep is not None:
                batch = keep(batch)
            if batch:
                send(batch)

    def _forget_scores_of(self, generations: Sequence[FinishedGeneration]) -> None:
        for generation in generations:
            self._dropped_ids[f"{generation.span_id:016x}"] = None
        while len(self._dropped_ids) > MAX_DROPPED_IDS:
            self._dropped_ids.popitem(last=False)

    def _without_dropped_observations(self, scores: list[dict[str, Any]]) -> list[dict[str, Any]]:
        if not self._dropped_ids:
            return scores
        kept = [s for s in scores if s.get("observationId") not in self._dropped_ids]
        if len(kept) < len(scores):
            self.scores.drop(
                [s for s in scores if s.get("observationId") in self._dropped_ids],
                "their generations were dropped",
                once=True,
            )
        return kept

    def _attempt_timeout(self) -> float | None:
        """Seconds one request may take now; None once a closing flush is out of time."""
        left = self._deadline - time.monotonic()
        if left <= 0.01:
            return None
        return min(self.config.timeout_s, left)  # one request, connect to last byte

    def _deliver(self, path: str, body: bytes, items: Sequence[Any]) -> str:
        """Post ``body`` until it is accepted, refused for its size, refused for good, or
        the retry policy (or a closing flush's deadline) is spent."""
        del items  # the body says it all
        if self._http is None:
            self._http = _Poster(self.config.base_url)
        compressed = gzip.compress(body, compresslevel=1)
        policy, started = self.retry, time.monotonic()
        for attempt in range(1, policy.attempts + 1):
            timeout_s = self._attempt_timeout()
            if timeout_s is None:
                return "the flush at close ran out of time"
            retry_after: float | None = None
            try:
                status, retry_after = self._http.post(path, compressed, self._headers, timeout_s)
            except (OSError, http.client.HTTPException) as error:
                why = f"Langfuse could not be reached ({type(error).__name__})"
            else:
                if 200 <= status < 300:
                    return _SENT
                if status == 413:
                    return _TOO_LARGE
                why = f"Langfuse answered HTTP {status}"
                if status not in RETRYABLE_STATUSES:
                    return why
            pause = policy.pause(attempt, retry_after)
            if attempt == policy.attempts or time.monotonic() - started + pause > policy.budget_s:
                return f"{why}, {attempt} attempt(s)"
            self._stopping.wait(pause)  # closing: the next attempt at once, if time is left
        return "no attempt was left"  # pragma: no cover - the loop returns on its last turn

    def _deliver_to_host(self, body: bytes, batch: Sequence[FinishedGeneration]) -> str:
        """A host's exporter gets ``ReadableSpan`` objects; it retries as it sees fit."""
        del body
        assert self._span_exporter is not None
        readable = [self._identity.readable(g) for g in batch]
        if self._span_exporter.export(readable) is SpanExportResult.SUCCESS:
            return _SENT
        return "the host's span exporter failed"

    # -- closing: bounded, releases thread, sockets and exit hooks ----------------------

    def close(self) -> None:
        """Send what is queued within ``flush_timeout_s``, then release everything."""
        atexit.unregister(self._at_exit)
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.cancel()
        self._close()

    def _close(self) -> None:
        self._begin_close()
        self._end_close()

    def _begin_close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._closing = self._worker if self._pid == os.getpid() else None
            self._deadline = time.monotonic() + self.config.flush_timeout_s
        if self._closing is not None:
            self._stop = True
            self._stopping.set()
            self._wake.set()

    def _end_close(self) -> None:
        """Wait for the flush, within the deadline (a second caller waits for the same)."""
        worker = self._closing
        if worker is not None:
            worker.join(max(0.0, self._deadline - time.monotonic()))
            if worker.is_alive() and self._http is not None:
                self._http.abort()  # a request past the deadline: break it off
                worker.join(1.0)
            if worker.is_alive():  # pragma: no cover - only a host exporter can block here
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
        _LIVE.discard(self)

    def _at_exit(self) -> None:
        """A process that never called close(): send what is queued, bounded."""
        self._close()


# -- SIGTERM: how containers and process managers stop a process ----------------------

_LIVE: weakref.WeakSet[ExportPipeline] = weakref.WeakSet()
_previous_sigterm: Any = None
_sigterm_flushing = False  # a flush for SIGTERM is under way on its own thread
_sigterm_flushed = False  # done: the next SIGTERM goes where it would have gone


def _install_sigterm_flush() -> None:
    """Put ``_on_sigterm`` in front of the SIGTERM handler there is (once per process).

    Only the main thread may set a handler; elsewhere this says so once and does nothing.
    """
    global _previous_sigterm
    try:
        current = signal.getsignal(signal.SIGTERM)
        if current is _on_sigterm:
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread (or not the main interpreter)
        logger.warning(
            "Langfuse flush_on_sigterm needs the runtime built on the main thread; "
            "SIGTERM will not flush"
        )
        return
    _previous_sigterm = current


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """Hand the flush to a thread and return at once; once it is done, that thread sends
    SIGTERM to the main thread again and this handler does what the previous one would
    have done: call it, ignore the signal, or die of it.

    Flushing here, on the interrupted main thread, could wait for a lock the interrupted
    code holds (an ``Event`` it was setting, a thread it was joining — a ``Pool`` worker
    flushing its own exit is one), and wait out the whole deadline for nothing.
    """
    global _sigterm_flushing
    if _sigterm_flushed or not _LIVE:
        _chain_sigterm(signum, frame)
    elif not _sigterm_flushing:  # a second SIGTERM meanwhile: the flush is under way
        _sigterm_flushing = True
        threading.Thread(target=_flush_for_sigterm, name="templiqx-langfuse-sigterm").start()


def _flush_for_sigterm() -> None:
    """Flush every live pipeline (their deadlines run side by side), then signal again."""
    global _sigterm_flushed
    if hasattr(signal, "pthread_sigmask"):  # the repeat must reach the main thread
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        pipelines = list(_LIVE)
        for pipeline in pipelines:
            pipeline._begin_close()
        for pipeline in pipelines:
            pipeline._end_close()
    finally:
        _sigterm_flushed = True
        main = threading.main_thread().ident
        if main is not None:
            signal.pthread_kill(main, signal.SIGTERM)


def _chain_sigterm(signum: int, frame: FrameType | None) -> None:
    previous = _previous_sigterm
    if callable(previous):
        previous(signum, frame)
    elif previous != signal.SIG_IGN:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as before: the signal ends us
        os.kill(os.getpid(), signal.SIGTERM)


def _forget_sigterm_flush() -> None:
    """A forked child has no flush under way, whatever its parent was doing."""
    global _sigterm_flushing, _sigterm_flushed
    _sigterm_flushing = _sigterm_flushed = False


if hasattr(os, "register_at_fork"):  # POSIX only
    os.register_at_fork(after_in_child=_forget_sigterm_flush)
