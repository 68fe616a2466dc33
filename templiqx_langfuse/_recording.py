"""Opening and ending Langfuse generations: the part of tracing that needs the SDK, so
imported only with tracing on (langfuse and OpenTelemetry cost ~0.2 s to import).

The attributes follow the Langfuse server's OTel mapping (``OtelIngestionProcessor``):
each rule relied on is named where it is used. Every value is bounded as it is set
(``bounded``), so no span can outgrow an export batch: OTel's processor batches by count
only, and its exporter drops a whole batch over 64 MiB.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import orjson
from langfuse import Langfuse
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry import trace as otel_trace
from opentelemetry.trace import Status, StatusCode

from templiqx_core import CompiledInteraction

from ._config import LangfuseConfig
from ._context import CALL_ATTRIBUTES, EXPERIMENT_ATTRIBUTES, JsonText, TraceAttributes, TraceRef
from ._export import LANGFUSE_SCOPE, SCORE_ATTRIBUTE, ExportPipeline
from ._redaction import json_text

__all__ = [
    "MAX_JSON_BYTES",
    "MAX_TEXT_BYTES",
    "Generation",
    "Recorder",
    "bounded",
    "generation_attributes",
]

#: Bound of one JSON document (input, output, metadata, ...), in UTF-8 bytes: above any
#: answer the 2 MiB response bound lets through, so only a host's own data reaches it.
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


def _size(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _head(text: str, limit: int) -> str:
    """At most ``limit`` UTF-8 bytes of ``text``, cut on a character boundary."""
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore")


def _bounded_text(text: str, limit: int, *, as_json: bool) -> str:
    """``text`` if it fits ``limit`` bytes, else its head with a visible marker; a JSON
    document stays a JSON document (an object: the server wants metadata to be one)."""
    if text.isascii():
        size = len(text)
    else:
        try:
            size = len(text.encode("utf-8"))
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
    """``attributes`` with every string within its bound (``MAX_JSON_BYTES`` for JSON
    documents, ``MAX_TEXT_BYTES`` otherwise) and encodable; tags share one bound."""
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
                room -= _size(items[-1]) + 8
            value = items
        result[key] = value
    return result


def _json(serialize: Callable[[Any], str], value: Any) -> str:
    """``value`` as JSON, or a marker saying why not (a mask may return a circular or
    otherwise unserializable value): the generation is never lost over one field."""
    try:
        return serialize(value)
    except Exception as error:
        return orjson.dumps({"templiqx_unserializable": type(error).__name__}).decode()


def generation_attributes(
    *,
    trace: Mapping[str, Any],
    input: Any = None,
    output: Any = None,
    metadata: Mapping[str, Any] | None = None,
    model: str | None = None,
    model_parameters: Mapping[str, Any] | None = None,
    usage_details: Mapping[str, int] | None = None,
    level: str | None = None,
    status_message: str | None = None,
    prompt: tuple[str, int] | None = None,
    completion_start_time: datetime | None = None,
    schema_valid: bool | None = None,
    serialize: Callable[[Any], str] = json_text,
) -> dict[str, Any]:
    """The attributes the SDK's ``update()`` writes, serialized once here: its per-field
    ``json.dumps`` and media scan cost more than the model call itself. Metadata is one JSON
    object, which the server parses (``parseMetadataAttribute``); None values are dropped.
    """
    attributes: dict[str, Any] = {
        **trace,
        A.OBSERVATION_MODEL: model,
        A.OBSERVATION_LEVEL: level,
        A.OBSERVATION_STATUS_MESSAGE: status_message,
        SCORE_ATTRIBUTE: schema_valid,
    }
    attributes = {key: value for key, value in attributes.items() if value is not None}
    for key, value in (
        (A.OBSERVATION_INPUT, input),
        (A.OBSERVATION_OUTPUT, output),
        (A.OBSERVATION_MODEL_PARAMETERS, model_parameters),
        (A.OBSERVATION_USAGE_DETAILS, usage_details),
    ):
        if value is not None:
            attributes[key] = value if isinstance(value, JsonText) else _json(serialize, value)
    if metadata:
        present = {key: value for key, value in metadata.items() if value is not None}
        attributes[A.OBSERVATION_METADATA] = _json(serialize, present)
    if completion_start_time is not None:
        # Time to first token (streaming adapters); the server reads a plain ISO string.
        attributes[A.OBSERVATION_COMPLETION_START_TIME] = (
            completion_start_time.astimezone(UTC)
            .isoformat(timespec="microseconds")
            .replace("+00:00", "Z")
        )
    if prompt is not None:
        # Server: prompts link only to GENERATION observations, by name *and* version.
        attributes[A.OBSERVATION_PROMPT_NAME], attributes[A.OBSERVATION_PROMPT_VERSION] = prompt
    return bounded(attributes)


class Generation:
    """One open generation, on the runtime's own provider or a host client's; the host's
    Langfuse SDK ends its own (``end``) so its bookkeeping sees it."""

    __slots__ = ("end_span", "span")

    def __init__(self, span: otel_trace.Span, end: Callable[[], object] | None = None) -> None:
        self.span = span
        self.end_span = end or span.end

    def finish(
        self, trace: Mapping[str, Any], update: dict[str, Any], serialize: Callable[[Any], str]
    ) -> None:
        """End it with ``update`` (the ``generation_attributes`` fields, redacted)."""
        try:
            attributes = generation_attributes(trace=trace, serialize=serialize, **update)
            self.span.set_attributes(attributes)
            if update.get("level") == "ERROR":
                message = attributes.get(A.OBSERVATION_STATUS_MESSAGE)
                self.span.set_status(Status(StatusCode.ERROR, message))
        finally:  # ended whatever happened: an open span is never exported
            self.end_span()


def _trace_attribute_map(attributes: TraceAttributes) -> dict[str, Any]:
    return {
        A.TRACE_TAGS: list(attributes.tags) or None,
        A.TRACE_SESSION_ID: attributes.session_id,
        A.TRACE_USER_ID: attributes.user_id,
    }


class Recorder:
    """Opens generations for one ``Tracing``: on its export path, or through a host's client."""

    def __init__(self, config: LangfuseConfig, redact: Callable[[str], str]) -> None:
        # What a generation opens with leaves the process too: redacted like the rest.
        self.config, self._redact = config, redact

    def open(
        self,
        interaction: CompiledInteraction,
        model: str,
        *,
        pipeline: ExportPipeline | None,
        client: Langfuse | None,
        within: otel_trace.Span | None = None,
    ) -> tuple[Generation, TraceRef, dict[str, Any]] | None:
        """The generation, where it lands and its trace-level attributes; None if sampled
        out. The adapter-owned ``pipeline`` is used when there is one, else ``client``;
        ``within`` (a repair's first generation) is its parent instead of the current span."""
        if within is None:
            return self._open(interaction, model, pipeline, client, None)
        with otel_trace.use_span(within, end_on_exit=False, record_exception=False):
            root = f"{within.get_span_context().span_id:016x}"
            return self._open(interaction, model, pipeline, client, root)

    def _open(
        self,
        interaction: CompiledInteraction,
        model: str,
        pipeline: ExportPipeline | None,
        client: Langfuse | None,
        root: str | None,
    ) -> tuple[Generation, TraceRef, dict[str, Any]] | None:
        parent = otel_trace.get_current_span()
        trace = self._trace_level(interaction.contract_id, parent)
        if pipeline is not None:
            started = self._start_owned(pipeline, interaction, model, trace)
        elif client is not None:
            started = self._start_sdk(client, interaction, model)
        else:
            return None
        if started is None:
            return None
        handle, ref = started
        experiment = EXPERIMENT_ATTRIBUTES.get()
        if experiment is not None:
            # Server (extractExperimentFields): the item's root observation is this one
            # (a repair's: the first try's).
            root = root or ref.observation_id
            handle.span.set_attributes(
                bounded({**experiment, A.EXPERIMENT_ITEM_ROOT_OBSERVATION_ID: root})
            )
        return handle, ref, trace

    def _trace_level(self, contract_id: str, parent: otel_trace.Span) -> dict[str, Any]:
        """Trace attributes for where the generation lands (server rules in comments)."""
        per_call = CALL_ATTRIBUTES.get()
        if _is_langfuse_span(parent):
            # The host owns the trace; an explicit call-site value still reaches it (the
            # server applies a non-root span's trace attributes, ``hasTraceUpdates``).
            return _trace_attribute_map(per_call) if per_call is not None else {}
        attributes = per_call or TraceAttributes(
            self.config.tags, self.config.session_id, self.config.user_id
        )
        trace = {
            A.TRACE_NAME: contract_id,
            **_trace_attribute_map(attributes),
            A.ENVIRONMENT: self.config.environment,
        }
        if parent.get_span_context().is_valid:
            # Under a span Langfuse never receives (plain OpenTelemetry, a remote parent):
            # ``as_root`` makes this a Langfuse trace of its own, keeping the trace id.
            trace[A.AS_ROOT] = True
        return trace

    def _start_owned(
        self,
        pipeline: ExportPipeline,
        interaction: CompiledInteraction,
        model: str,
        trace: dict[str, Any],
    ) -> tuple[Generation, TraceRef] | None:
        pipeline.adopt()  # a forked child's exit hooks, once
        # What the SDK writes when it opens a generation.
        redact = self._redact
        attributes: dict[str, Any] = {
            A.OBSERVATION_TYPE: "generation",
            A.VERSION: redact(interaction.contract_version),
            A.OBSERVATION_MODEL: redact(model),
        }
        if self.config.environment is not None:
            attributes[A.ENVIRONMENT] = redact(self.config.environment)
        if self.config.release is not None:
            attributes[A.RELEASE] = redact(self.config.release)
        if A.TRACE_NAME in trace:
            attributes[A.IS_APP_ROOT] = True
        name = _bounded_text(redact(interaction.contract_id), MAX_TEXT_BYTES, as_json=False)
        span = pipeline.tracer.start_span(name, attributes=bounded(attributes))
        if not span.is_recording():  # sampled out
            return None
        context = span.get_span_context()
        trace_hex = f"{context.trace_id:032x}"
        ref = TraceRef(trace_hex, f"{context.span_id:016x}", self.config.trace_url(trace_hex))
        return Generation(span), ref

    def _start_sdk(
        self, client: Langfuse, interaction: CompiledInteraction, model: str
    ) -> tuple[Generation, TraceRef]:
        # The SDK opens the observation; its span is current only long enough to get it.
        with client.start_as_current_observation(
            name=self._redact(interaction.contract_id),
            as_type="generation",
            model=self._redact(model),
            version=self._redact(interaction.contract_version),
            end_on_exit=False,
        ) as generation:
            span = otel_trace.get_current_span()
        ref = TraceRef(
            generation.trace_id, generation.id, self.config.trace_url(generation.trace_id)
        )
        return Generation(span, generation.end), ref


def _is_langfuse_span(span: otel_trace.Span) -> bool:
    """A recording span of a Langfuse SDK tracer (the server's ``isLangfuseSDKSpans``)."""
    if not span.get_span_context().is_valid:
        return False
    scope = getattr(span, "instrumentation_scope", None)
    return scope is not None and str(scope.name).startswith(LANGFUSE_SCOPE)
