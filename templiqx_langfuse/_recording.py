"""Opening and ending Langfuse generations (imported with tracing on), attributes as the
server's ``OtelIngestionProcessor`` maps them, each value bounded so no span outgrows a batch."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry import trace as otel_trace
from opentelemetry.trace import Status, StatusCode

from templiqx_core import codes
from templiqx_core.adapters import CallOutcome, RepairAttempt, RuntimeCall, current_repair

from ._config import LangfuseConfig
from ._export import LANGFUSE_SCOPE, SCORE_ATTRIBUTE
from ._tracing import (
    CALL_ATTRIBUTES,
    EXPERIMENT_ATTRIBUTES,
    PROMPT_LINKS,
    TRACE_COLLECTORS,
    GenerationRecord,
    JsonText,
    TraceAttributes,
    TraceRef,
    prompt_link,
)
from ._wire import Completion, RequestBody

if TYPE_CHECKING:  # ``_host`` imports this module when tracing is on
    from ._host import Tracing


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
# Keys of what a repairing call's tries share (``RepairAttempt.notes``): the first try's
# generation, under which the others open, and each try's last generation.
_REPAIR_ANCHOR = "templiqx_langfuse.anchor"
_REPAIR_REF = "templiqx_langfuse.ref"


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
    """``attributes`` without None values, every string encodable and within its bound;
    tags share one bound."""
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
    """``value`` as JSON, or a marker saying why not (a mask may return a circular value):
    the generation is never lost over one field."""
    try:
        return value if isinstance(value, JsonText) else serialize(value)
    except Exception as error:
        return orjson.dumps({"templiqx_unserializable": type(error).__name__}).decode()


class Generation(GenerationRecord):
    """A live generation; what is known only at its end is set in ``finish``."""

    def __init__(
        self,
        tracing: Tracing,
        span: otel_trace.Span,
        ref: TraceRef,
        opening: dict[str, Any],
        metadata: dict[str, Any],
        repair: RepairAttempt | None,
    ) -> None:
        super().__init__()
        self._tracing, self._span, self.ref = tracing, span, ref
        self._opening, self._metadata, self._repair = opening, metadata, repair

    def finish(self, outcome: CallOutcome, *, first_token_at: datetime | None = None) -> None:
        """Serialized once here (the SDK's per-field ``json.dumps`` and media scan cost more
        than the model call itself), then ended."""
        super().finish(outcome)
        tracing, redactor, repair = self._tracing, self._tracing.redactor, self._repair
        receipt, completion, output = outcome.receipt, outcome.details, None
        try:
            if receipt is None or not isinstance(completion, Completion):
                code, error, detail = outcome.code or "", outcome.error, outcome.detail
                repaired = repair is not None and error is not None and repair.repairs(error)
                fields: dict[str, Any] = {
                    # An answer sent back for repair is an earlier try, not the call's failure.
                    A.OBSERVATION_LEVEL: "WARNING" if repaired else "ERROR",
                    A.OBSERVATION_STATUS_MESSAGE: f"{code}: {detail}" if detail else code,
                }
                metadata = {**self._metadata, "error_code": code, "error_detail": detail}
            else:
                valid, output, usage = receipt.output_schema_valid, receipt.output, completion.usage
                repaired = repair is not None and repair.repairs(receipt)
                pipeline = tracing.pipeline
                posts_scores = pipeline is not None and pipeline.posts_scores
                fields = {
                    A.OBSERVATION_USAGE_DETAILS: _json(redactor.json_text, usage)
                    if usage
                    else None,
                    # Langfuse infers cost from the model that answered (as its OpenAI
                    # integration reports it), the requested one otherwise.
                    A.OBSERVATION_MODEL: completion.provider_model or None,
                    A.OBSERVATION_LEVEL: None if valid and not repaired else "WARNING",
                    A.OBSERVATION_STATUS_MESSAGE: None if valid else codes.OUTPUT_SCHEMA,
                    SCORE_ATTRIBUTE: valid if posts_scores else None,  # posted once it arrived
                }
                metadata = {
                    **self._metadata,
                    "output_fingerprint": receipt.output_fingerprint,
                    "output_schema_valid": valid,
                    "finish_reason": completion.finish_reason,
                    "response_id": completion.response_id,
                }
            # Plain text from the provider is redacted too (a gateway may echo the key).
            for key in (A.OBSERVATION_MODEL, A.OBSERVATION_STATUS_MESSAGE):
                if isinstance(fields.get(key), str):
                    fields[key] = redactor.text(fields[key])
            if tracing.config.mask is not None:  # the input was masked when serialized
                output = None if output is None else tracing.masked("output", output)
                metadata = tracing.masked("metadata", metadata)
            attributes = self._opening | fields
            if output is not None:
                attributes[A.OBSERVATION_OUTPUT] = _json(redactor.json_text, output)
            if metadata:  # one JSON object, which the server parses (parseMetadataAttribute)
                present = {key: value for key, value in metadata.items() if value is not None}
                attributes[A.OBSERVATION_METADATA] = _json(redactor.json_text, present)
            if first_token_at is not None:  # time to first token: a plain ISO string
                attributes[A.OBSERVATION_COMPLETION_START_TIME] = (
                    first_token_at.astimezone(UTC)
                    .isoformat(timespec="microseconds")
                    .replace("+00:00", "Z")
                )
            attributes = bounded(attributes)
            self._span.set_attributes(attributes)
            if attributes.get(A.OBSERVATION_LEVEL) == "ERROR":
                message = attributes.get(A.OBSERVATION_STATUS_MESSAGE)
                self._span.set_status(Status(StatusCode.ERROR, message))
        except Exception as error:  # tracing must never fail the call
            tracing.report_error("ending a generation", error)
        finally:  # ended whatever happened: an open span is never exported
            self._span.end()


def open_generation(
    tracing: Tracing, call: RuntimeCall, body: RequestBody, model: str
) -> Generation | None:
    """The call's generation, None if sampled out. A repairing call's later tries nest under
    the first try's generation and name the previous try's (``repair_of``)."""
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
        # Server (extractExperimentFields): the item's root observation is this one
        # (a repair's: the first try's).
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
    opening = {
        key: tracing.redactor.value(value) if isinstance(value, (str, list, tuple)) else value
        for key, value in trace.items()
    }
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
        # Under a span Langfuse never receives (plain OpenTelemetry, a remote parent):
        # ``as_root`` makes this a Langfuse trace of its own, keeping the trace id.
        trace[A.AS_ROOT] = True
    return trace
