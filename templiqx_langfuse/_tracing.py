"""Recording executions to Langfuse through the official SDK, off the critical path.

One generation observation per ``execute``. Recording is best effort: every SDK call is
guarded so that a tracing failure is logged once and never reaches the caller, and
nothing here blocks on the network (no per-call flush, no ``get_trace_url``).

The attributes follow the Langfuse server's OTel mapping (``OtelIngestionProcessor``):
each rule this module relies on is named where it is used.
"""

from __future__ import annotations

import contextvars
import json
import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson
from langfuse import Langfuse
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace.export import SpanExporter
from opentelemetry.trace import Status, StatusCode

from templiqx_core import AdapterDescriptor, CompiledInteraction, ExecutionReceipt, codes
from templiqx_core.adapters import CallOutcome

from ._config import LangfuseConfig
from ._export import ExportPipeline, FinishedGeneration
from ._redaction import Redactor
from ._wire import Completion

__all__ = [
    "GenerationRecord",
    "TraceAttributes",
    "TraceRef",
    "TracedReceipt",
    "Tracing",
    "collect_traces",
    "trace_attributes",
]

logger = logging.getLogger("templiqx_langfuse")

# Metadata keys (SPEC §5.5): constants, so tests and call sites cannot drift apart.
META_CONTRACT_ID = "contract_id"
META_CONTRACT_VERSION = "contract_version"
META_COMPILER = "compiler"
META_REQUEST_FINGERPRINT = "request_fingerprint"
META_OUTPUT_FINGERPRINT = "output_fingerprint"
META_OUTPUT_SCHEMA_VALID = "output_schema_valid"
META_ADAPTER_ID = "adapter_id"
META_ADAPTER_VERSION = "adapter_version"
META_FINISH_REASON = "finish_reason"
META_RESPONSE_ID = "response_id"
META_REQUESTED_MODEL = "requested_model"
META_IGNORED_POLICY_KEYS = "ignored_policy_keys"
META_ERROR_CODE = "error_code"
META_ERROR_DETAIL = "error_detail"

#: The contract extension naming the Langfuse prompt a generation is linked to.
PROMPT_EXTENSION = "langfuse.prompt"
#: The capability that extension declares (the runtime offers it).
PROMPT_CAPABILITY = "langfuse_prompt"
#: The server treats spans of instrumentation scopes starting with this as Langfuse SDK
#: spans (``isLangfuseSDKSpans``); it is also the SDK's tracer name.
LANGFUSE_SCOPE = "langfuse-sdk"


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value).decode()
    except (TypeError, orjson.JSONEncodeError):
        return json.dumps(value, default=str, ensure_ascii=False)


class JsonText(str):
    """A value already serialized (and redacted): written as it is."""


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
    serialize: Callable[[Any], str] = _json,
) -> dict[str, Any]:
    """The generation's Langfuse OTel attributes, serialized once with orjson.

    These are the attributes the SDK's ``update()`` writes (the public
    ``LangfuseOtelSpanAttributes`` schema Langfuse ingests), written directly: the SDK's
    per-field ``json.dumps`` and its media scan cost more than the model call's own
    client work on the hot path.

    Metadata travels as one JSON object in ``langfuse.observation.metadata``: the server
    parses that object (``parseMetadataAttribute``) and stores each value as the SDK's
    per-key attributes would be stored (strings as they are, anything else as JSON), so
    the meaning is the same at a fraction of the attributes. Keys whose value is None are
    dropped, as the SDK drops them.
    """
    attributes: dict[str, Any] = {key: value for key, value in trace.items() if value is not None}
    for key, value in (
        (A.OBSERVATION_INPUT, input),
        (A.OBSERVATION_OUTPUT, output),
        (A.OBSERVATION_MODEL_PARAMETERS, model_parameters),
        (A.OBSERVATION_USAGE_DETAILS, usage_details),
    ):
        if value is not None:
            attributes[key] = value if isinstance(value, JsonText) else serialize(value)
    if model is not None:
        attributes[A.OBSERVATION_MODEL] = model
    if level is not None:
        attributes[A.OBSERVATION_LEVEL] = level
    if status_message is not None:
        attributes[A.OBSERVATION_STATUS_MESSAGE] = status_message
    if metadata:
        present = {key: value for key, value in metadata.items() if value is not None}
        attributes[A.OBSERVATION_METADATA] = serialize(present)
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
    return attributes


def prompt_link(extensions: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(name, version)`` from a contract's ``langfuse.prompt`` extension, if well formed."""
    value = extensions.get(PROMPT_EXTENSION)
    if not isinstance(value, dict):
        return None
    name, version = value.get("name"), value.get("version")
    if not isinstance(name, str) or not name.strip():
        return None
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        return None
    return name, version


@dataclass(frozen=True)
class TraceAttributes:
    """Trace-level attributes: user, session and tags of the Langfuse trace."""

    tags: tuple[str, ...] = ()
    session_id: str | None = None
    user_id: str | None = None


_CALL_ATTRIBUTES: contextvars.ContextVar[TraceAttributes | None] = contextvars.ContextVar(
    "templiqx_langfuse_trace_attributes", default=None
)


@contextmanager
def trace_attributes(
    *, tags: Sequence[str] = (), session_id: str | None = None, user_id: str | None = None
) -> Iterator[None]:
    """Per-call trace attributes for executions inside the block (overrides configuration).

    They reach the trace wherever the generation lands: as the trace's own attributes
    when it is the root, as a trace update when it is nested under a host observation.
    """
    token = _CALL_ATTRIBUTES.set(TraceAttributes(tuple(tags), session_id, user_id))
    try:
        yield
    finally:
        _CALL_ATTRIBUTES.reset(token)


@dataclass(frozen=True)
class TraceRef:
    """Where one execution landed in Langfuse: its trace, its generation, a URL if known."""

    trace_id: str
    observation_id: str
    url: str | None = None


@dataclass(frozen=True)
class TracedReceipt:
    """A receipt and where its execution landed in Langfuse (None fields: not traced)."""

    receipt: ExecutionReceipt
    trace_id: str | None
    observation_id: str | None
    trace_url: str | None


_COLLECTORS: contextvars.ContextVar[tuple[list[TraceRef], ...]] = contextvars.ContextVar(
    "templiqx_langfuse_trace_collectors", default=()
)


@contextmanager
def collect_traces() -> Iterator[list[TraceRef]]:
    """Collect a ``TraceRef`` for every traced execution started inside the block.

    The receipt is a wire contract and carries no trace id; this is how a host finds the
    trace of a receipt without searching (``runtime.execute_traced`` uses it). Blocks nest:
    an execution is collected by every enclosing block.
    """
    found: list[TraceRef] = []
    token = _COLLECTORS.set((*_COLLECTORS.get(), found))
    try:
        yield found
    finally:
        _COLLECTORS.reset(token)


def _trace_attribute_map(attributes: TraceAttributes) -> dict[str, Any]:
    return {
        A.TRACE_TAGS: list(attributes.tags) or None,
        A.TRACE_SESSION_ID: attributes.session_id,
        A.TRACE_USER_ID: attributes.user_id,
    }


class _SdkGeneration:
    """A generation opened through a host's Langfuse client: the host's pipeline."""

    __slots__ = ("generation", "span")

    def __init__(self, generation: Any, span: otel_trace.Span) -> None:
        self.generation = generation
        self.span = span

    def end(self, attributes: dict[str, Any], error: str | None) -> None:
        self.span.set_attributes(attributes)
        if error is not None:
            self.span.set_status(Status(StatusCode.ERROR, error))
        self.generation.end()


class _OwnedGeneration:
    """A generation on the adapter-owned export path: ids, times and a dict, no span."""

    __slots__ = (
        "attributes",
        "name",
        "parent_span_id",
        "pipeline",
        "span_id",
        "start_ns",
        "trace_id",
    )

    def __init__(
        self,
        pipeline: ExportPipeline,
        *,
        trace_id: int,
        span_id: int,
        parent_span_id: int | None,
        name: str,
        attributes: dict[str, Any],
    ) -> None:
        self.pipeline = pipeline
        self.trace_id = trace_id
        self.span_id = span_id
        self.parent_span_id = parent_span_id
        self.name = name
        self.attributes = attributes
        self.start_ns = time.time_ns()

    def end(self, attributes: dict[str, Any], error: str | None) -> None:
        self.attributes.update(attributes)
        self.pipeline.submit(
            FinishedGeneration(
                self.trace_id,
                self.span_id,
                self.parent_span_id,
                self.name,
                self.start_ns,
                time.time_ns(),
                self.attributes,
                error,
            )
        )


class GenerationRecord:
    """The live generation of one execution; finish it exactly once."""

    def __init__(
        self,
        tracing: Tracing,
        handle: _SdkGeneration | _OwnedGeneration | None,
        metadata: dict[str, Any],
        *,
        trace: dict[str, Any] | None = None,
        ref: TraceRef | None = None,
        **fields: Any,
    ) -> None:
        self._tracing = tracing
        self._handle = handle
        self._metadata = metadata
        self._trace = trace or {}  # trace-level attributes (root, or explicit trace updates)
        self.ref = ref
        self._fields = fields  # input, model and its parameters, sent with the final update

    def finish(self, outcome: CallOutcome, *, first_token_at: datetime | None = None) -> None:
        """End the generation with the port's outcome of the call, whatever it is.

        ``first_token_at`` (streaming adapters) becomes the generation's
        ``completion_start_time``, on success and on failure alike.
        """
        if outcome.receipt is not None and isinstance(outcome.details, Completion):
            self.succeed(outcome.receipt, outcome.details, first_token_at=first_token_at)
        else:
            self.fail(code=outcome.code or "", detail=outcome.detail, first_token_at=first_token_at)

    def succeed(
        self,
        receipt: ExecutionReceipt,
        completion: Completion,
        *,
        first_token_at: datetime | None = None,
    ) -> None:
        valid = receipt.output_schema_valid
        model = completion.provider_model
        self._finish(
            output=receipt.output,
            usage_details=dict(completion.usage) or None,
            metadata={
                **self._metadata,
                META_OUTPUT_FINGERPRINT: receipt.output_fingerprint,
                META_OUTPUT_SCHEMA_VALID: valid,
                META_FINISH_REASON: completion.finish_reason,
                META_RESPONSE_ID: completion.response_id,
            },
            # Langfuse infers cost from the model it is told: the one that answered (as
            # Langfuse's own OpenAI integration reports it), the requested one otherwise.
            **({"model": model} if model else {}),
            level=None if valid else "WARNING",
            status_message=None if valid else codes.OUTPUT_SCHEMA,
            completion_start_time=first_token_at,
        )
        if self.ref is not None:
            self._tracing.score_schema_validity(self.ref, valid)

    def fail(self, *, code: str, detail: str, first_token_at: datetime | None = None) -> None:
        self._finish(
            metadata={**self._metadata, META_ERROR_CODE: code, META_ERROR_DETAIL: detail},
            level="ERROR",
            status_message=code,
            completion_start_time=first_token_at,
        )

    def _finish(self, **update: Any) -> None:
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        redactor = self._tracing.redactor
        update = {k: v for k, v in {**self._fields, **update}.items() if v is not None}
        # Plain-text fields come from the provider too (a gateway may echo the key in
        # ``model``): every one is redacted, as the JSON ones are in their serialization.
        for name in ("status_message", "model"):
            if isinstance(update.get(name), str):
                update[name] = redactor.text(update[name])
        trace = {k: redactor.text(v) if isinstance(v, str) else v for k, v in self._trace.items()}
        try:
            # Input, output and metadata are serialized and redacted in one pass each.
            attributes = generation_attributes(trace=trace, serialize=redactor.json_text, **update)
            error = update.get("status_message") if update.get("level") == "ERROR" else None
            handle.end(attributes, error)
        except Exception as error:  # tracing must never fail the call
            self._tracing.report_error("ending a generation", error)


_TRACE_ID_LIMIT = (1 << 64) - 1
_INPUT_CACHE_SIZE = 256


class Tracing:
    """Turns executions into Langfuse generations: on the adapter-owned export path, or
    through a host's Langfuse client (its pipeline, never flushed or shut down here)."""

    def __init__(
        self,
        config: LangfuseConfig,
        redactor: Redactor,
        *,
        client: Langfuse | None = None,
        pipeline: ExportPipeline | None = None,
    ) -> None:
        self.client = client
        self.pipeline = pipeline
        self.config = config
        self.redactor = redactor
        self._error_logged = threading.Event()
        rate = config.sample_rate
        # The SDK's sampler (TraceIdRatioBased): keep a trace when the low 64 bits of its
        # id fall under the bound, so every span and score of a trace agrees.
        self._sample_bound = None if rate is None or rate >= 1 else round(rate * (1 << 64))
        #: The last execution this runtime started (for one-shot tools such as the CLI).
        self.last_ref: TraceRef | None = None
        # Holding the interaction keeps its id from being reused while it is cached.
        self._inputs: OrderedDict[int, tuple[CompiledInteraction, JsonText]] = OrderedDict()
        self._inputs_lock = threading.Lock()

    @classmethod
    def build(
        cls,
        config: LangfuseConfig,
        redactor: Redactor,
        *,
        client: Langfuse | None = None,
        span_exporter: SpanExporter | None = None,
    ) -> Tracing:
        """Use the host's client as is, or the adapter-owned export path."""
        if client is not None:
            return cls(config, redactor, client=client)
        if not config.enabled:
            logger.warning(
                "Langfuse tracing disabled: LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY not set; "
                "executions still run"
            )
            return cls(config, redactor)
        # Never a Langfuse client of its own: the SDK keeps one per public key for the
        # whole process (a host's, or another runtime's, would be handed over), and its
        # threads outlive a runtime. The owned path shares nothing.
        return cls(config, redactor, pipeline=ExportPipeline(config, span_exporter=span_exporter))

    @property
    def enabled(self) -> bool:
        return self.client is not None or self.pipeline is not None

    def report_error(self, what: str, error: BaseException) -> None:
        if not self._error_logged.is_set():
            self._error_logged.set()
            logger.warning(
                "Langfuse tracing error while %s (%s); executions are unaffected",
                what,
                type(error).__name__,
            )

    def _trace_level(self, contract_id: str, parent: otel_trace.Span) -> dict[str, Any]:
        """Trace attributes for where the generation lands (server rules in comments)."""
        per_call = _CALL_ATTRIBUTES.get()
        if _is_langfuse_span(parent):
            # Nested under a host Langfuse observation: the host owns the trace. An
            # explicit call-site value still reaches it: the server applies
            # ``user.id``/``session.id``/``langfuse.trace.*`` of a non-root span as a
            # trace update (``hasTraceUpdates``); configured defaults defer to the host.
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
            # Under a span Langfuse never receives (a plain OpenTelemetry host span, or a
            # remote parent): the server treats a span as its trace's root when
            # ``langfuse.internal.as_root`` is true, so this becomes a complete Langfuse
            # trace of its own, keeping the host's trace id.
            trace[A.AS_ROOT] = True
        return trace

    def start(
        self,
        interaction: CompiledInteraction,
        *,
        model: str,
        model_parameters: Mapping[str, Any],
        request_fp: str,
        adapter: AdapterDescriptor,
        ignored_policy_keys: Sequence[str],
    ) -> GenerationRecord:
        """Open the generation (as root, or nested under the active span)."""
        metadata: dict[str, Any] = {
            META_CONTRACT_ID: interaction.contract_id,
            META_CONTRACT_VERSION: interaction.contract_version,
            META_COMPILER: interaction.compiler,
            META_REQUEST_FINGERPRINT: request_fp,
            META_ADAPTER_ID: adapter.id,
            META_ADAPTER_VERSION: adapter.version,
            META_REQUESTED_MODEL: model,
            META_IGNORED_POLICY_KEYS: list(ignored_policy_keys),
        }
        if not self.enabled:
            return GenerationRecord(self, None, metadata)
        try:
            parent = otel_trace.get_current_span()
            trace = self._trace_level(interaction.contract_id, parent)
            handle: _SdkGeneration | _OwnedGeneration | None
            if self.pipeline is not None:
                handle, ref = self._start_owned(interaction, model, parent, trace)
            else:
                handle, ref = self._start_sdk(interaction, model)
        except Exception as error:
            self.report_error("starting a generation", error)
            return GenerationRecord(self, None, metadata)
        if ref is None:  # sampled out
            return GenerationRecord(self, None, metadata)
        for collector in _COLLECTORS.get():
            collector.append(ref)
        self.last_ref = ref
        return GenerationRecord(
            self,
            handle,
            metadata,
            trace=trace,
            ref=ref,
            input=self._input_json(interaction),
            model_parameters=dict(model_parameters),
            prompt=prompt_link(interaction.extensions),
        )

    def _input_json(self, interaction: CompiledInteraction) -> JsonText:
        """The messages as redacted JSON, once per interaction: interactions are frozen and
        usually executed many times, and the messages are the largest attribute."""
        hit = self._inputs.get(id(interaction))
        if hit is not None and hit[0] is interaction:
            return hit[1]
        messages = [{"role": m.role, "content": m.content} for m in interaction.messages]
        text = JsonText(self.redactor.json_text(messages))
        with self._inputs_lock:
            self._inputs[id(interaction)] = (interaction, text)
            if len(self._inputs) > _INPUT_CACHE_SIZE:
                self._inputs.popitem(last=False)
        return text

    def _start_owned(
        self,
        interaction: CompiledInteraction,
        model: str,
        parent: otel_trace.Span,
        trace: dict[str, Any],
    ) -> tuple[_OwnedGeneration | None, TraceRef | None]:
        assert self.pipeline is not None
        context = parent.get_span_context()
        if context.is_valid:
            trace_id, parent_span_id = context.trace_id, context.span_id
        else:
            trace_id, parent_span_id = random.getrandbits(128) or 1, None
        bound = self._sample_bound
        if bound is not None and trace_id & _TRACE_ID_LIMIT >= bound:
            return None, None
        span_id = random.getrandbits(64) or 1
        # What the SDK writes when it opens a generation (observation type, version,
        # model, environment, release, and ``is_app_root`` for the first span of a trace
        # that reaches Langfuse).
        attributes: dict[str, Any] = {
            A.OBSERVATION_TYPE: "generation",
            A.VERSION: interaction.contract_version,
            A.OBSERVATION_MODEL: model,
        }
        if self.config.environment is not None:
            attributes[A.ENVIRONMENT] = self.config.environment
        if self.config.release is not None:
            attributes[A.RELEASE] = self.config.release
        if A.TRACE_NAME in trace:
            attributes[A.IS_APP_ROOT] = True
        handle = _OwnedGeneration(
            self.pipeline,
            trace_id=trace_id,
            span_id=span_id,
            parent_span_id=parent_span_id,
            name=interaction.contract_id,
            attributes=attributes,
        )
        trace_hex = f"{trace_id:032x}"
        return handle, TraceRef(trace_hex, f"{span_id:016x}", self.config.trace_url(trace_hex))

    def _start_sdk(
        self, interaction: CompiledInteraction, model: str
    ) -> tuple[_SdkGeneration, TraceRef]:
        assert self.client is not None
        # The SDK opens the observation (type, model, version, parent, ids). Its span is
        # made current only long enough to get hold of it: the round trip runs outside,
        # and the generation is ended explicitly.
        with self.client.start_as_current_observation(
            name=interaction.contract_id,
            as_type="generation",
            model=model,
            version=interaction.contract_version,
            end_on_exit=False,
        ) as generation:
            span = otel_trace.get_current_span()
        ref = TraceRef(
            generation.trace_id, generation.id, self.config.trace_url(generation.trace_id)
        )
        return _SdkGeneration(generation, span), ref

    def score_schema_validity(self, ref: TraceRef, valid: bool) -> None:
        """A BOOLEAN score on the generation; queued, sent off the call path."""
        name = self.config.schema_score_name
        if name is None:
            return
        try:
            if self.pipeline is not None:
                score: dict[str, Any] = {
                    "id": f"{random.getrandbits(64):016x}",
                    "traceId": ref.trace_id,
                    "observationId": ref.observation_id,
                    "name": name,
                    "value": 1 if valid else 0,
                    "dataType": "BOOLEAN",
                }
                if self.config.environment is not None:
                    score["environment"] = self.config.environment
                self.pipeline.submit_score(score)
            elif self.client is not None:
                self.client.create_score(
                    name=name,
                    value=1.0 if valid else 0.0,
                    data_type="BOOLEAN",
                    trace_id=ref.trace_id,
                    observation_id=ref.observation_id,
                )
        except Exception as error:  # scoring must never fail the call
            self.report_error("scoring a generation", error)

    def close(self) -> None:
        """Flush the adapter-owned export path within the configured bound; never a host's."""
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            try:
                pipeline.close()
            except Exception as error:
                self.report_error("flushing", error)


def _is_langfuse_span(span: otel_trace.Span) -> bool:
    """A recording span of a Langfuse SDK tracer (the server's ``isLangfuseSDKSpans``)."""
    if not span.get_span_context().is_valid:
        return False
    scope = getattr(span, "instrumentation_scope", None)
    return scope is not None and str(scope.name).startswith(LANGFUSE_SCOPE)
