"""Generations as Langfuse's ``OtelIngestionProcessor`` maps them, bounded, sent on a private
``TracerProvider`` per runtime: OTel batches, retries and backs off; by hand what it lacks."""

from __future__ import annotations

import atexit
import base64
import functools
import io
import logging
import os
import signal
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType
from typing import Any, Protocol

import orjson
import requests
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, SpanLimits, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, TraceIdRatioBased
from opentelemetry.trace import Status, StatusCode, Tracer

from templiqx_core import CompiledInteraction, codes
from templiqx_core.adapters import CallOutcome, RepairAttempt, RuntimeCall, current_repair

from ._config import LangfuseConfig
from ._redaction import Redactor, SecretHeaders
from ._tracing import (
    CALL_ATTRIBUTES,
    EXPERIMENT_ATTRIBUTES,
    PROMPT_LINKS,
    TRACE_COLLECTORS,
    GenerationRecord,
    TraceAttributes,
    TraceRef,
    prompt_link,
)
from ._version import DISTRIBUTION, __version__
from ._wire import Completion, RequestBody

logger = logging.getLogger("templiqx_langfuse")

#: Spans waiting (each bounded): a burst beyond loses its oldest, the caller never waits.
MAX_QUEUE = 10_000
#: Per export request: Langfuse logs bodies over 16 MB as oversized, OTel drops over 64 MiB.
MAX_BATCH_BYTES = 16 * 2**20
#: Per scores request: Langfuse's scores route keeps Next.js's 1 MB body limit.
MAX_SCORE_BATCH_BYTES = 512 * 2**10
#: What is read of a Langfuse answer (its body is never needed): more closes the socket.
MAX_RESPONSE_BYTES = 64 * 1024
#: A generation's schema validity, from which its score is posted once it has arrived.
SCORE_ATTRIBUTE = "templiqx.score.output_schema_valid"
#: Tries of a scores request on 429/408/409/5xx or no connection, as the generated client's.
SCORE_TRIES = 3
#: The server reads spans of scopes starting with this as Langfuse SDK spans.
LANGFUSE_SCOPE = "langfuse-sdk"
#: Every limit given: a host's ``OTEL_SPAN_*`` count of 8 would strip a generation's type.
_LIMITS = SpanLimits(
    max_attributes=128,
    max_events=128,
    max_links=128,
    max_span_attributes=128,
    max_event_attributes=128,
    max_link_attributes=128,
    max_attribute_length=SpanLimits.UNSET,
    max_span_attribute_length=SpanLimits.UNSET,
)


class _PinnedSession(requests.Session):
    """Headers and TLS pinned (the exporter reads ``OTEL_EXPORTER_OTLP_*``), answers bounded."""

    def __init__(self, headers: Mapping[str, str]) -> None:
        super().__init__()
        self.trust_env = False  # no proxy, netrc or CA-bundle lookups from the environment
        self.pinned = headers

    def merge_environment_settings(self, *args: Any, **kwargs: Any) -> Any:
        return {"proxies": {}, "stream": True, "verify": True, "cert": None}

    def get_redirect_target(self, resp: Any) -> None:
        return None  # not followed: requests reads a redirect's whole body first, unbounded

    def request(self, method: str | bytes, url: str | bytes, *args: Any, **kwargs: Any) -> Any:
        kwargs["headers"] = self.pinned
        response = super().request(method, url, *args, **kwargs)
        body = response.raw.read(MAX_RESPONSE_BYTES + 1, decode_content=False)
        if len(body) > MAX_RESPONSE_BYTES:
            response.raw.close()  # the rest is never read: this connection is not reused
        else:
            response.raw.release_conn()
        response.raw = io.BytesIO(body[:MAX_RESPONSE_BYTES])
        return response


def _batches(spans: Sequence[ReadableSpan]) -> Iterator[Sequence[ReadableSpan]]:
    """Runs of at most about ``MAX_BATCH_BYTES`` (OTel batches by count only)."""
    start, total = 0, 0
    for index, span in enumerate(spans):
        size = 256 + len(span.name)
        for key, value in (span.attributes or {}).items():
            size += len(key) + 8
            for item in value if isinstance(value, (list, tuple)) else (value,):
                if isinstance(item, str):
                    size += len(item) if item.isascii() else len(item.encode("utf-8", "replace"))
                else:
                    size += 16
        if total + size > MAX_BATCH_BYTES and index > start:
            yield spans[start:index]
            start, total = index, 0
        total += size
    if start < len(spans):
        yield spans[start:]


_Route = tuple[_PinnedSession, str]  # the scores session and URL


def _post(route: _Route, body: bytes, sent: int, budget_s: float) -> int:
    """Scores rejected (a 207), else raises; the generated client's costs ~500 µs a score."""
    session, url = route
    until = time.monotonic() + budget_s
    for attempt in range(SCORE_TRIES):
        try:
            answer = session.post(url, data=body, timeout=budget_s)
            if answer.status_code == 207:
                try:
                    count = orjson.loads(answer.content).get("rejected")
                except (orjson.JSONDecodeError, AttributeError):
                    return sent
                return min(count, sent) if isinstance(count, int) and count >= 0 else sent
            if answer.status_code < 300:
                return 0
            retry = answer.status_code >= 500 or answer.status_code in (408, 409, 429)
            why = f"HTTP {answer.status_code}"
        except requests.RequestException as error:
            retry, why = True, type(error).__name__
        pause = 2.0**attempt
        if not retry or attempt + 1 == SCORE_TRIES or time.monotonic() + pause > until:
            raise RuntimeError(why)
        time.sleep(pause)
    raise AssertionError("unreachable: the last try returns or raises")


class _Delivery(SpanExporter):
    """The exporter fed byte-bounded batches; a score follows its span once it arrived."""

    def __init__(self, inner: SpanExporter, config: LangfuseConfig, scores: _Route | None) -> None:
        self.inner, self._config, self._scores = inner, config, scores
        self.dropped = self.scores_dropped = 0
        self._warned: set[str] = set()
        self._shut = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        dropped = self.dropped
        for batch in _batches(spans):
            try:
                result, why = self.inner.export(batch), "the export failed"
            except Exception as error:  # OTel's own parse of an answer (a Retry-After date)
                result, why = SpanExportResult.FAILURE, f"the export raised {type(error).__name__}"
            if result is SpanExportResult.SUCCESS:
                self._warned.discard("outage")
                self._post_scores(batch)
            else:
                self.dropped += len(batch)
                self._warn_once("outage", f"dropped {len(batch)} spans: {why}")
        return SpanExportResult.SUCCESS if self.dropped == dropped else SpanExportResult.FAILURE

    def _post_scores(self, batch: Sequence[ReadableSpan]) -> None:
        name = self._config.schema_score_name
        if self._scores is None or name is None:
            return
        env = self._config.environment
        environment = {"environment": env} if env else {}  # the server refuses null
        scores = [  # the SDK's ``CreateScoreRequest`` fields
            {
                # One id per generation: a retried post updates, never duplicates.
                "id": f"{span.context.span_id:016x}-schema",
                "traceId": f"{span.context.trace_id:032x}",
                "observationId": f"{span.context.span_id:016x}",
                "name": name,
                "value": 1.0 if valid else 0.0,
                "dataType": "BOOLEAN",
                **environment,
            }
            for span in batch
            if span.context is not None
            and isinstance(valid := (span.attributes or {}).get(SCORE_ATTRIBUTE), bool)
        ]
        per_request = max(1, MAX_SCORE_BATCH_BYTES // (512 + len(name.encode())))
        for start in range(0, len(scores), per_request):
            chunk = scores[start : start + per_request]
            try:
                body = orjson.dumps(chunk)
                rejected = _post(self._scores, body, len(chunk), self._config.timeout_s)
                why = "rejected"
            except Exception as error:  # what it says is a status or an error's type
                rejected, why = len(chunk), str(error)
            if rejected:
                self.scores_dropped += rejected
                self._warn_once("scores", f"dropped {rejected} scores ({why})")

    def _warn_once(self, key: str, what: str) -> None:
        if key not in self._warned:
            self._warned.add(key)
            logger.warning("Langfuse export: %s (executions are unaffected)", what)

    def shutdown(self) -> None:
        if not self._shut:  # close() may get here before the processor does
            self._shut = True
            self.inner.shutdown()


def _in_thread(work: Callable[[], object]) -> threading.Thread:
    """OTel's flush and shutdown have no deadline: the caller joins this with its own."""
    thread = threading.Thread(target=work, name="templiqx-langfuse-flush", daemon=True)
    thread.start()
    return thread


class ExportPipeline:
    """One runtime's tracer provider, processor and exporter."""

    def __init__(self, config: LangfuseConfig, *, span_exporter: SpanExporter | None) -> None:
        self.config = config
        base = config.base_url.rstrip("/")
        self._sessions: list[_PinnedSession] = []
        scores = None
        if span_exporter is None:  # a host's exporter sends where and how it sees fit
            credentials = ":".join(config.keys()).encode()
            headers = SecretHeaders(  # who sends: the server attributes ingestion by it
                {
                    "authorization": f"Basic {base64.b64encode(credentials).decode()}",
                    "user-agent": f"{DISTRIBUTION}/{__version__}",
                    "x-langfuse-sdk-name": DISTRIBUTION,
                    "x-langfuse-sdk-version": __version__,
                    "x-langfuse-public-key": config.keys()[0],
                }
            )
            otlp_headers = {
                "content-type": "application/x-protobuf",
                "content-encoding": "gzip",
                "x-langfuse-ingestion-version": "4",
            }
            json_headers = {"content-type": "application/json", "accept-encoding": "identity"}
            self._sessions = [
                _PinnedSession(SecretHeaders({**headers, **otlp_headers})),
                _PinnedSession(SecretHeaders({**headers, **json_headers})),
            ]
            span_exporter = OTLPSpanExporter(
                endpoint=base + "/api/public/otel/v1/traces",
                timeout=config.timeout_s,
                compression=Compression.Gzip,
                session=self._sessions[0],
            )
            scores = (self._sessions[1], base + "/api/public/scores")
        self.delivery = _Delivery(span_exporter, config, scores)
        self.posts_scores = scores is not None and config.schema_score_name is not None
        rate = config.sample_rate  # by trace id, as the SDK's: a trace's spans all agree
        self.provider = TracerProvider(
            sampler=ALWAYS_ON if rate is None or rate >= 1 else TraceIdRatioBased(rate),
            resource=Resource.create(),
            shutdown_on_exit=False,  # ours is bounded by flush_timeout_s
            span_limits=_LIMITS,
        )
        self.provider.add_span_processor(
            BatchSpanProcessor(  # every argument given: none from OTEL_BSP_*
                self.delivery,
                max_queue_size=MAX_QUEUE,
                schedule_delay_millis=config.flush_interval_s * 1000,
                max_export_batch_size=config.flush_at,
                export_timeout_millis=config.timeout_s * 1000,
            )
        )
        self.tracer: Tracer = self.provider.get_tracer(
            LANGFUSE_SCOPE, __version__, attributes={"public_key": config.keys()[0]}
        )
        self._lock = threading.Lock()
        self._closed = False
        self._finalizer: Any = None
        self._pid = -1
        self.adopt()
        if config.flush_on_sigterm:
            _flush_on_sigterm(self)

    def adopt(self) -> None:
        """Exit hooks for this process (again in a forked child)."""
        if self._pid == os.getpid():
            return
        for session in self._sessions if self._pid != -1 else ():  # forked: not the parent's
            session.mount("http://", requests.adapters.HTTPAdapter())  # pooled sockets
            session.mount("https://", requests.adapters.HTTPAdapter())
        self._pid = os.getpid()
        atexit.register(self.close)
        # A multiprocessing child ends in os._exit, past atexit: finalizers are all it runs.
        util = sys.modules.get("multiprocessing.util")
        self._finalizer = util.Finalize(None, self.close, exitpriority=10) if util else None

    def close(self) -> None:
        """Send what is queued within ``flush_timeout_s``, then release everything."""
        atexit.unregister(self.close)
        finalizer, self._finalizer = self._finalizer, None
        if finalizer is not None:
            finalizer.cancel()
        with self._lock:
            if self._closed:
                return
            self._closed = True
        _LIVE.discard(self)
        closing = _in_thread(self.provider.shutdown)
        closing.join(self.config.flush_timeout_s)
        if closing.is_alive():
            self.delivery.shutdown()  # cuts a retry pause short
            waited = self.config.flush_timeout_s
            logger.warning("Langfuse flush: traces pending after %.1f s dropped", waited)
        for session in self._sessions:
            session.close()


_LIVE: weakref.WeakSet[ExportPipeline] = weakref.WeakSet()  # flushed on SIGTERM
_flushing = False


def _on_sigterm(previous: Any, signum: int, frame: FrameType | None) -> None:
    """Flush within the bound, then hand on to ``previous`` (at once when nested in ours)."""
    global _flushing
    flushes, _flushing = not _flushing, True
    try:
        if flushes:
            try:
                pipelines = list(_LIVE)
                threads = [_in_thread(pipeline.provider.force_flush) for pipeline in pipelines]
                timeouts = (pipeline.config.flush_timeout_s for pipeline in pipelines)
                deadline = time.monotonic() + max(timeouts, default=0.0)
                for thread in threads:
                    thread.join(max(0.0, deadline - time.monotonic()))
            except Exception as error:  # e.g. no thread at interpreter exit: hand on anyway
                logger.warning("Langfuse flush on SIGTERM failed (%s)", type(error).__name__)
        if callable(previous):
            previous(signum, frame)
        elif previous != signal.SIG_IGN:  # the default (or a C handler's None): it ends us
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        if flushes:
            _flushing = False


def _flush_on_sigterm(pipeline: ExportPipeline) -> None:
    """Ours in front of the current handler, unless that is ours."""
    try:
        current = signal.getsignal(signal.SIGTERM)
        if not (isinstance(current, functools.partial) and current.func is _on_sigterm):
            signal.signal(signal.SIGTERM, functools.partial(_on_sigterm, current))
    except ValueError:  # not the main thread (or not the main interpreter)
        logger.warning("Langfuse flush_on_sigterm: built off the main thread, SIGTERM won't flush")
        return
    _LIVE.add(pipeline)


#: Bound of one JSON document in UTF-8 bytes: above any answer the 2 MiB response bound passes.
MAX_JSON_BYTES = 3 * 2**20
#: Bound of any other text (names, ids, model, status message, all tags together).
MAX_TEXT_BYTES = 64 * 2**10
_JSON_KEYS = frozenset(
    {
        A.OBSERVATION_INPUT,
        A.OBSERVATION_OUTPUT,
        A.OBSERVATION_METADATA,
        A.OBSERVATION_MODEL_PARAMETERS,
        A.OBSERVATION_USAGE_DETAILS,
        A.TRACE_METADATA,
        A.EXPERIMENT_METADATA,
        A.EXPERIMENT_ITEM_METADATA,
        A.EXPERIMENT_ITEM_EXPECTED_OUTPUT,
    }
)
_MARKER = "[truncated by templiqx-langfuse: {kept} of {size} bytes kept]"
# ``RepairAttempt.notes`` keys: the first try's span (the others nest), each try's ref.
_REPAIR_ANCHOR = "templiqx_langfuse.anchor"
_REPAIR_REF = "templiqx_langfuse.ref"


def _head(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes of ``text``, cut on a character boundary."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def _bounded_text(text: str, limit: int, *, as_json: bool) -> str:
    """Cut to its head and a visible marker; JSON stays a JSON object (as metadata must)."""
    try:
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate: it would fail the whole batch
        text = text.encode("utf-8", "replace").decode("utf-8")
        size = len(text.encode("utf-8"))
    if size <= limit:
        return text
    if not as_json:
        kept = limit - 80
        return f"{_head(text, kept)} {_MARKER.format(kept=kept, size=size)}"
    kept = (limit - 160) // 2  # JSON escaping at most doubles a JSON text's head
    marked = {"templiqx_truncated": _MARKER.format(kept=kept, size=size)}
    return orjson.dumps({**marked, "head": _head(text, kept)}).decode()


def bounded(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Without None values, each string encodable and within its bound (tags share one)."""
    result: dict[str, Any] = {}
    for key, value in attributes.items():
        if isinstance(value, str):
            if len(value) > MAX_TEXT_BYTES or not value.isascii():  # else: fits, encodes
                json_doc = key in _JSON_KEYS
                limit = MAX_JSON_BYTES if json_doc else MAX_TEXT_BYTES
                value = _bounded_text(value, limit, as_json=json_doc)
        elif isinstance(value, (list, tuple)) and value and isinstance(value[0], str):
            items: list[str] = []
            room = MAX_TEXT_BYTES
            for item in value:
                if room < 256:
                    kept = f"{len(items)} of {len(value)} items kept"
                    items.append(f"[truncated by templiqx-langfuse: {kept}]")
                    break
                items.append(_bounded_text(item, room - 128, as_json=False))
                room -= len(items[-1].encode()) + 8
            value = items
        if value is not None:
            result[key] = value
    return result


def _json(serialize: Callable[[Any], str], value: Any) -> str:
    """JSON, or a marker saying why not (a mask may return a circular value)."""
    try:
        return serialize(value)
    except Exception as error:
        return orjson.dumps({"templiqx_unserializable": type(error).__name__}).decode()


class Tracing(Protocol):
    """What a generation needs of ``_host.Tracing``, which imports this module (no circle)."""

    config: LangfuseConfig
    redactor: Redactor
    pipeline: ExportPipeline | None
    on_ref: Callable[[TraceRef], None] | None

    def report_error(self, what: str, error: BaseException) -> None: ...
    def input_json(self, interaction: CompiledInteraction) -> str | None: ...
    def masked(self, field: str, data: Any) -> Any: ...


@dataclass(eq=False)
class Generation(GenerationRecord):
    """A live generation; what is known only at its end is set in ``finish``."""

    tracing: Tracing
    span: otel_trace.Span
    ref: TraceRef
    opening: dict[str, Any]
    metadata: dict[str, Any]
    repair: RepairAttempt | None

    def __post_init__(self) -> None:
        super().__init__()

    def finish(self, outcome: CallOutcome, *, first_token_at: datetime | None = None) -> None:
        """Serialized once (the SDK's per-field ``json.dumps`` costs more than the call)."""
        super().finish(outcome)
        tracing, redactor, repair = self.tracing, self.tracing.redactor, self.repair
        receipt, completion, output = outcome.receipt, outcome.details, None
        try:
            if receipt is None or not isinstance(completion, Completion):
                code, error, detail = outcome.code or "", outcome.error, outcome.detail
                repaired = repair is not None and error is not None and repair.repairs(error)
                message = f"{code}: {detail}" if detail else code
                fields: dict[str, Any] = {
                    # An answer sent back for repair is an earlier try, not the call's failure.
                    A.OBSERVATION_LEVEL: "WARNING" if repaired else "ERROR",
                    A.OBSERVATION_STATUS_MESSAGE: redactor.text(message),  # a provider's text
                }
                metadata = {**self.metadata, "error_code": code, "error_detail": detail}
            else:
                valid, output, usage = receipt.output_schema_valid, receipt.output, completion.usage
                repaired = repair is not None and repair.repairs(receipt)
                posts_scores = tracing.pipeline is not None and tracing.pipeline.posts_scores
                usage_json = _json(redactor.json_text, usage) if usage else None
                fields = {
                    A.OBSERVATION_USAGE_DETAILS: usage_json,
                    # Cost is inferred from the model that answered, as Langfuse's OpenAI's.
                    A.OBSERVATION_MODEL: redactor.text(completion.provider_model or "") or None,
                    A.OBSERVATION_LEVEL: None if valid and not repaired else "WARNING",
                    A.OBSERVATION_STATUS_MESSAGE: None if valid else codes.OUTPUT_SCHEMA,
                    SCORE_ATTRIBUTE: valid if posts_scores else None,  # posted once it arrived
                }
                metadata = {
                    **self.metadata,
                    "output_fingerprint": receipt.output_fingerprint,
                    "output_schema_valid": valid,
                    "finish_reason": completion.finish_reason,
                    "response_id": completion.response_id,
                }
            if tracing.config.mask is not None:  # the input was masked when serialized
                output = None if output is None else tracing.masked("output", output)
                metadata = tracing.masked("metadata", metadata)
            attributes = self.opening | fields
            if output is not None:
                attributes[A.OBSERVATION_OUTPUT] = _json(redactor.json_text, output)
            if metadata:  # one JSON object, which the server parses (parseMetadataAttribute)
                present = {key: value for key, value in metadata.items() if value is not None}
                attributes[A.OBSERVATION_METADATA] = _json(redactor.json_text, present)
            if first_token_at is not None:  # time to first token: a plain ISO string
                first = first_token_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                attributes[A.OBSERVATION_COMPLETION_START_TIME] = first
            attributes = bounded(attributes)
            self.span.set_attributes(attributes)
            if attributes.get(A.OBSERVATION_LEVEL) == "ERROR":
                description = attributes.get(A.OBSERVATION_STATUS_MESSAGE)
                self.span.set_status(Status(StatusCode.ERROR, description))
        except Exception as error:  # tracing must never fail the call
            tracing.report_error("ending a generation", error)
        finally:  # ended whatever happened: an open span is never exported
            self.span.end()


def open_generation(
    tracing: Tracing, call: RuntimeCall, body: RequestBody, model: str
) -> Generation | None:
    """None if sampled out; a repair's later tries nest under the first and name the last."""
    interaction, repair, config = call.request.interaction, current_repair(), tracing.config
    redact, pipeline = tracing.redactor.text, tracing.pipeline
    if pipeline is None:  # closed meanwhile
        return None
    within = None if repair is None else repair.notes.get(_REPAIR_ANCHOR)
    anchor = otel_trace.use_span(within, record_exception=False) if within else nullcontext()
    with anchor:
        trace = _trace_level(config, interaction.contract_id, otel_trace.get_current_span())
        pipeline.adopt()  # a forked child's exit hooks, once
        # What the SDK writes when it opens a generation; redacted, as all that leaves.
        attributes: dict[str, Any] = {
            A.OBSERVATION_TYPE: "generation",
            A.VERSION: redact(interaction.contract_version),
            A.OBSERVATION_MODEL: redact(model),
            A.ENVIRONMENT: None if config.environment is None else redact(config.environment),
            A.RELEASE: None if config.release is None else redact(config.release),
            A.IS_APP_ROOT: True if A.TRACE_NAME in trace else None,
        }
        name = _bounded_text(redact(interaction.contract_id), MAX_TEXT_BYTES, as_json=False)
        span = pipeline.tracer.start_span(name, attributes=bounded(attributes))
    if not span.is_recording():  # sampled out
        return None
    context = span.get_span_context()
    trace_id, observation_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    ref = TraceRef(trace_id, observation_id, config.trace_url(trace_id))
    experiment = EXPERIMENT_ATTRIBUTES.get()
    if experiment is not None:
        # Server (extractExperimentFields): the item's root is this one (or the first try).
        root = f"{within.get_span_context().span_id:016x}" if within else ref.observation_id
        span.set_attributes(bounded({**experiment, A.EXPERIMENT_ITEM_ROOT_OBSERVATION_ID: root}))
    metadata: dict[str, Any] = {
        "contract_id": interaction.contract_id,
        "contract_version": interaction.contract_version,
        "compiler": interaction.compiler,
        "request_fingerprint": call.request_fingerprint,
        "adapter_id": call.adapter.id,
        "adapter_version": call.adapter.version,
        "requested_model": model,
        "ignored_policy_keys": list(body.ignored_policy_keys),
        "json_schema_strict": body.strict,
    }
    if repair is not None:
        notes = repair.notes
        notes.setdefault(_REPAIR_ANCHOR, span)
        previous = notes.get((_REPAIR_REF, repair.number - 1))
        notes[(_REPAIR_REF, repair.number)] = ref
        if previous is not None:
            metadata["repair_attempt"] = repair.number
            metadata["repair_of"] = previous.observation_id
    for collector in TRACE_COLLECTORS.get():
        collector.append(ref)
    if tracing.on_ref is not None:
        try:
            tracing.on_ref(ref)
        except Exception as error:  # a surface's callback never fails the call
            tracing.report_error("reporting a trace URL", error)
    # Tags are a list of strings: redacted item by item, as every string that leaves.
    opening = {key: tracing.redactor.value(value) for key, value in trace.items()}
    opening[A.OBSERVATION_INPUT] = tracing.input_json(interaction)
    opening[A.OBSERVATION_MODEL_PARAMETERS] = _json(
        tracing.redactor.json_text, body.model_parameters
    )
    prompt = prompt_link(interaction.extensions) or PROMPT_LINKS.get(
        (interaction.contract_id, interaction.contract_version)
    )
    if prompt is not None:
        # Server: prompts link only to GENERATION observations, by name *and* version.
        opening[A.OBSERVATION_PROMPT_NAME], opening[A.OBSERVATION_PROMPT_VERSION] = prompt
    return Generation(tracing, span, ref, opening, metadata, repair)


def _trace_level(
    config: LangfuseConfig, contract_id: str, parent: otel_trace.Span
) -> dict[str, Any]:
    """Trace attributes for where the generation lands (server rules in comments)."""
    per_call = CALL_ATTRIBUTES.get()
    attributes = per_call or TraceAttributes(config.tags, config.session_id, config.user_id)
    trace: dict[str, Any] = {
        A.TRACE_NAME: contract_id,
        A.TRACE_TAGS: list(attributes.tags) or None,
        A.TRACE_SESSION_ID: attributes.session_id,
        A.TRACE_USER_ID: attributes.user_id,
        A.ENVIRONMENT: config.environment,
    }
    nested = parent.get_span_context().is_valid
    scope = getattr(parent, "instrumentation_scope", None)
    if nested and scope is not None and str(scope.name).startswith(LANGFUSE_SCOPE):
        # Under a Langfuse SDK span (``isLangfuseSDKSpans``) the host owns the trace; an
        # explicit call-site value still reaches it (``hasTraceUpdates``).
        per_trace = (A.TRACE_TAGS, A.TRACE_SESSION_ID, A.TRACE_USER_ID)
        return {key: trace[key] for key in per_trace} if per_call is not None else {}
    if nested:
        # Under a span Langfuse never receives: a Langfuse trace of its own, same trace id.
        trace[A.AS_ROOT] = True
    return trace
