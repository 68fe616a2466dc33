"""Traces and scores to Langfuse through OpenTelemetry's own pipeline.

Each runtime owns a private ``TracerProvider`` (never the global one, never shared: the
SDK's one-client-per-public-key would hand one runtime's spans to another's shutdown)
with a ``BatchSpanProcessor`` and a gzip ``OTLPSpanExporter`` (which retries 429/5xx).
Added here, only what those lack: ``_Delivery`` halves a batch refused for its size (413),
makes an unencodable string ``?`` in its span alone (OTel would lose the batch), and posts
each score once its span has arrived; answers are read up to ``MAX_RESPONSE_BYTES``;
``close()`` is bounded by ``flush_timeout_s``, also in a ``multiprocessing`` child and,
with ``flush_on_sigterm``, on SIGTERM before the signal is handed on.
"""

from __future__ import annotations

import atexit
import base64
import gzip
import io
import logging
import os
import random
import re
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import orjson
import requests
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased
from opentelemetry.trace import Status, Tracer
from requests.adapters import HTTPAdapter

from . import _sigterm as sigterm
from ._config import LangfuseConfig
from ._redaction import SecretHeaders
from ._version import DISTRIBUTION, __version__

__all__ = ["LANGFUSE_SCOPE", "ExportPipeline"]

logger = logging.getLogger("templiqx_langfuse")

OTLP_TRACES_PATH = "/api/public/otel/v1/traces"
INGESTION_PATH = "/api/public/ingestion"
#: Spans (and scores) waiting; beyond this the oldest are dropped, the caller never waits.
MAX_QUEUE = 10_000
#: What is read of a Langfuse answer (its body is never used): more closes the socket.
MAX_RESPONSE_BYTES = 64 * 1024
#: The server reads spans of scopes starting with this as Langfuse SDK spans.
LANGFUSE_SCOPE = "langfuse-sdk"
#: Attribute values are JSON documents: ``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT`` would cut them.
_UNLIMITED = SpanLimits(
    max_attribute_length=SpanLimits.UNSET, max_span_attribute_length=SpanLimits.UNSET
)


class _BoundedAdapter(HTTPAdapter):
    """Reads at most ``MAX_RESPONSE_BYTES`` of an answer and notes its status (OTel's
    result says only "failed")."""

    status: int | None = None

    def send(self, request: requests.PreparedRequest, *args: Any, **kwargs: Any) -> Any:
        kwargs["stream"] = True  # requests passes it by name; the body is read here, bounded
        response = super().send(request, *args, **kwargs)
        self.status = response.status_code
        raw = response.raw
        body = raw.read(MAX_RESPONSE_BYTES + 1, decode_content=False)
        if len(body) > MAX_RESPONSE_BYTES:
            raw.close()  # the rest is never read: this connection is not reused
        else:
            raw.release_conn()
        response.raw = io.BytesIO(body[:MAX_RESPONSE_BYTES])
        return response


_SURROGATE = re.compile("[\ud800-\udfff]")  # the one thing UTF-8 cannot encode


def _encodable(value: Any) -> bool:
    if isinstance(value, str):
        return value.isascii() or _SURROGATE.search(value) is None
    return not isinstance(value, (list, tuple)) or all(map(_encodable, value))


def _replaced(value: Any) -> Any:
    if isinstance(value, str):
        return value.encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, (list, tuple)):
        return [_replaced(item) for item in value]
    return value


def _sendable(span: ReadableSpan) -> ReadableSpan:
    """``span`` itself, or a copy with each unencodable string made encodable."""
    description = span.status.description
    attributes = span.attributes or {}
    if (
        _encodable(span.name)
        and _encodable(description)
        and all(_encodable(v) for v in attributes.values())
    ):
        return span
    return ReadableSpan(
        name=_replaced(span.name),
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes={key: _replaced(value) for key, value in attributes.items()},
        events=span.events,
        links=span.links,
        kind=span.kind,
        status=Status(span.status.status_code, _replaced(description)),
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class _Scores:
    """Scores wait, keyed by span id, until their span has arrived, then go out with the
    batch's turn: one attempt, kept for the next on failure (never holding spans up)."""

    def __init__(self, config: LangfuseConfig, session: requests.Session) -> None:
        self._url = config.base_url.rstrip("/") + INGESTION_PATH
        self._timeout_s = config.timeout_s
        self._session = session
        self._waiting: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._ready: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.dropped = 0

    def add(self, span_id: int, score: dict[str, Any]) -> None:
        with self._lock:
            self._waiting[span_id] = score
            if len(self._waiting) > MAX_QUEUE:
                self._waiting.popitem(last=False)
                self.dropped += 1

    def settle(self, spans: Sequence[ReadableSpan], *, arrived: bool) -> None:
        """The spans' scores are ready to go (``arrived``), or lost with them."""
        with self._lock:
            taken = (self._waiting.pop(s.context.span_id, None) for s in spans if s.context)
            scores = [score for score in taken if score is not None]
            if arrived:
                self._ready += scores
            else:
                self.dropped += len(scores)

    def send(self, headers: Mapping[str, str], *, last: bool = False) -> None:
        """Post the ready scores as one ingestion batch; on failure keep them (unless
        ``last``)."""
        with self._lock:
            scores, self._ready = self._ready, []
        if not scores:
            return
        timestamp = datetime.now(UTC).isoformat().replace("+00:00", "Z")
        event = {"type": "score-create", "timestamp": timestamp}
        events = [{**event, "id": f"{random.getrandbits(128):032x}", "body": s} for s in scores]
        body = gzip.compress(orjson.dumps({"batch": events}), compresslevel=1)
        headers = SecretHeaders(
            {**headers, "content-encoding": "gzip", "content-type": "application/json"}
        )
        try:
            response = self._session.post(
                self._url, data=body, headers=headers, timeout=self._timeout_s
            )
            if response.ok:
                return
            failed = f"Langfuse answered HTTP {response.status_code}"
        except requests.RequestException as error:
            failed = f"Langfuse could not be reached ({type(error).__name__})"
        with self._lock:
            kept = [] if last else (scores + self._ready)[-MAX_QUEUE:]
            lost = len(scores) + len(self._ready) - len(kept)
            self._ready = kept
        if lost:
            self.dropped += lost
            logger.warning("Langfuse export: dropped %d scores because %s", lost, failed)


class _Delivery(SpanExporter):
    """The OTLP exporter (or a host's), plus what it lacks (see the module docstring)."""

    def __init__(
        self,
        inner: SpanExporter,
        scores: _Scores,
        headers: Mapping[str, str],
        adapter: _BoundedAdapter | None,
    ) -> None:
        self.inner, self._scores, self._headers, self._adapter = inner, scores, headers, adapter
        self.exported = 0
        self.dropped = 0
        self._warned: set[str] = set()
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        pending = [[_sendable(span) for span in spans]]
        complete = True
        while pending:  # halving on 413: at most 2 * len(spans) sends
            batch = pending.pop()
            if self._adapter is not None:
                self._adapter.status = None
            if self.inner.export(batch) is SpanExportResult.SUCCESS:
                self.exported += len(batch)
                self._warned.discard("outage")
                self._scores.settle(batch, arrived=True)
                continue
            complete = False
            status = self._adapter.status if self._adapter is not None else None
            if status == 413 and len(batch) > 1:
                middle = len(batch) // 2
                pending += [batch[middle:], batch[:middle]]
            elif status == 413:
                self._drop(batch, "it is larger than Langfuse accepts (HTTP 413)", key=None)
            else:
                why = f"Langfuse answered HTTP {status}" if status else "the export failed"
                self._drop(batch, why, key="outage")
        self._scores.send(self._headers)
        return SpanExportResult.SUCCESS if complete else SpanExportResult.FAILURE

    def _drop(self, batch: Sequence[ReadableSpan], why: str, *, key: str | None) -> None:
        """Count, forget their scores, and warn (an outage once, a too-large span each)."""
        self.dropped += len(batch)
        self._scores.settle(batch, arrived=False)
        if key in self._warned:
            return
        if key is not None:
            self._warned.add(key)
        logger.warning(
            "Langfuse export: dropped %d spans because %s (executions are unaffected)",
            len(batch),
            why,
        )

    def shutdown(self) -> None:
        if not self._shut:  # close() may get here before the processor does
            self._shut = True
            self._scores.send(self._headers, last=True)
            self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return self.inner.force_flush(timeout_millis)


def _basic_auth(config: LangfuseConfig) -> str:
    credentials = ":".join(config.keys()).encode()
    return f"Basic {base64.b64encode(credentials).decode()}"


class ExportPipeline:
    """One runtime's tracer provider, processor, exporter and score batch."""

    def __init__(self, config: LangfuseConfig, *, span_exporter: SpanExporter | None) -> None:
        self.config = config
        headers = SecretHeaders(  # in no plain local: tracebacks may print their locals
            {
                "authorization": _basic_auth(config),
                # Who sends this (the server attributes ingestion by it): this package.
                "x-langfuse-sdk-name": DISTRIBUTION,
                "x-langfuse-sdk-version": __version__,
                "x-langfuse-public-key": config.keys()[0],
                "x-langfuse-ingestion-version": "4",
            }
        )
        base = config.base_url.rstrip("/")
        session = requests.Session()
        # No proxy, netrc or CA-bundle lookups from the environment on every post (a third
        # of the export's CPU); the model calls do not consult them either.
        session.trust_env = False
        adapter = _BoundedAdapter()
        session.mount(base + "/", adapter)
        self._session = session
        self.scores = _Scores(config, session)
        # A host's exporter retries as it sees fit, and its status is its own.
        hosts = span_exporter is not None
        if span_exporter is None:
            span_exporter = OTLPSpanExporter(
                endpoint=base + OTLP_TRACES_PATH,
                headers=headers,
                timeout=config.timeout_s,
                compression=Compression.Gzip,
                session=session,
            )
        self.delivery = _Delivery(span_exporter, self.scores, headers, None if hosts else adapter)
        rate = config.sample_rate  # by trace id, as the SDK's: a trace's spans all agree
        self.provider = TracerProvider(
            sampler=ALWAYS_ON if rate is None or rate >= 1 else TraceIdRatioBased(rate),
            resource=Resource.create(),
            shutdown_on_exit=False,  # ours is bounded by flush_timeout_s
            span_limits=_UNLIMITED,
        )
        # The processor starts its thread now, and again in a forked child from the fork
        # hook it registers now: neither may take the stop signals from the main thread.
        with sigterm.stop_signals_blocked(after_fork_while=self):
            processor = BatchSpanProcessor(
                self.delivery,
                max_queue_size=MAX_QUEUE,
                schedule_delay_millis=config.flush_interval_s * 1000,
                max_export_batch_size=config.flush_at,
            )
        self.provider.add_span_processor(processor)
        self.tracer: Tracer = self.provider.get_tracer(
            LANGFUSE_SCOPE, __version__, attributes={"public_key": config.keys()[0]}
        )
        self._lock = threading.Lock()
        self._closed = False
        self._closing: threading.Thread | None = None
        self._deadline = 0.0
        self._finalizer: Any = None
        self._pid = -1
        self.adopt()
        if config.flush_on_sigterm:
            sigterm.flush_on_sigterm(self)

    def adopt(self) -> None:
        """Exit hooks for this process (again in a forked child: ``multiprocessing``
        clears finalizers)."""
        if self._pid == os.getpid():
            return
        self._pid = os.getpid()
        atexit.register(self.close)
        # A multiprocessing child ends in os._exit, past atexit: its finalizers are the one
        # exit hook it runs. Only looked up when that module is loaded.
        util = sys.modules.get("multiprocessing.util")
        self._finalizer = util.Finalize(None, self.close, exitpriority=10) if util else None

    def score(self, span_id: int, score: dict[str, Any]) -> None:
        """Queue a score; it leaves once the span ``span_id`` has arrived."""
        self.scores.add(span_id, score)

    def flush(self) -> None:
        """Send what is queued within ``flush_timeout_s``; the pipeline stays open."""
        self.provider.force_flush(int(self.config.flush_timeout_s * 1000))

    def close(self) -> None:
        """Send what is queued within ``flush_timeout_s``, then release everything."""
        atexit.unregister(self.close)
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.cancel()
        self._begin_close()
        self._end_close()

    def _begin_close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # BatchSpanProcessor.shutdown has no deadline of its own (it joins for 30 s).
            self._closing = threading.Thread(
                target=self.provider.shutdown, name="templiqx-langfuse-flush", daemon=True
            )
            self._deadline = time.monotonic() + self.config.flush_timeout_s
            self._closing.start()

    def _end_close(self) -> None:
        closing = self._closing
        if closing is not None:
            closing.join(max(0.0, self._deadline - time.monotonic()))
            if closing.is_alive():
                self.delivery.shutdown()  # cuts a retry pause short; a request in flight
                logger.warning(  # ends within timeout_s
                    "Langfuse flush did not finish within %.1f s; pending traces dropped",
                    self.config.flush_timeout_s,
                )
        self._session.close()
        sigterm.forget(self)
