"""Tracing executions to Langfuse, off the critical path: one generation per ``execute``.

Best effort: a tracing failure is logged once and never reaches the caller. Every runtime
imports this, so it never imports langfuse or OpenTelemetry (~0.2 s): ``_recording`` and
``_export`` are imported only with tracing on.
"""

from __future__ import annotations

import contextvars
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from templiqx_core import AdapterDescriptor, CompiledInteraction, ExecutionReceipt, codes
from templiqx_core.adapters import CallOutcome, RepairAttempt, current_repair

from ._config import LangfuseConfig
from ._context import (
    JsonText,
    TraceAttributes,
    TraceRef,
    experiment_attributes,
    scoped,
    trace_attributes,
)
from ._prompt_links import linked_prompt
from ._redaction import Redactor
from ._wire import Completion, Usage

if TYPE_CHECKING:
    from langfuse import Langfuse
    from opentelemetry.sdk.trace.export import SpanExporter

    from ._export import ExportPipeline
    from ._recording import Generation, Recorder

__all__ = [
    "GenerationRecord",
    "TraceAttributes",
    "TraceRef",
    "TracedReceipt",
    "Tracing",
    "collect_traces",
    "collect_usage",
    "experiment_attributes",
    "trace_attributes",
]

logger = logging.getLogger("templiqx_langfuse")

#: Read by OpenTelemetry's ``TracerProvider`` itself: set, it records nothing.
ENV_OTEL_SDK_DISABLED = "OTEL_SDK_DISABLED"

# Metadata keys: constants, so tests and call sites cannot drift apart.
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
META_STRICT = "json_schema_strict"  # the strict flag sent (what ``strict="auto"`` chose)
META_ERROR_CODE = "error_code"
META_ERROR_DETAIL = "error_detail"
META_REPAIR_ATTEMPT = "repair_attempt"
META_REPAIR_OF = "repair_of"

#: The contract extension naming the Langfuse prompt a generation is linked to.
PROMPT_EXTENSION = "langfuse.prompt"
#: The capability that extension declares (the runtime offers it).
PROMPT_CAPABILITY = "langfuse_prompt"


def prompt_link(extensions: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(name, version)`` from a contract's ``langfuse.prompt`` extension, if well formed."""
    value = extensions.get(PROMPT_EXTENSION)
    if not isinstance(value, dict):
        return None
    name, version = value.get("name"), value.get("version")
    if not isinstance(name, str) or not name.strip() or isinstance(version, bool):
        return None
    return (name, version) if isinstance(version, int) and version >= 1 else None


@dataclass(frozen=True)
class TracedReceipt:
    """A receipt and where its execution landed in Langfuse (None fields: not traced)."""

    receipt: ExecutionReceipt
    trace_id: str | None
    observation_id: str | None
    trace_url: str | None
    #: The tokens the call used, whenever the provider reported them (traced or not).
    usage: Usage | None = None

    @classmethod
    def of(
        cls,
        receipt: ExecutionReceipt,
        found: Sequence[TraceRef],
        used: Sequence[Mapping[str, int]] = (),
    ) -> TracedReceipt:
        """The receipt with the last trace ``collect_traces`` found for it (if any) and the
        last usage ``collect_usage`` found."""
        usage = Usage.of(used[-1]) if used else None
        if not found:
            return cls(receipt, None, None, None, usage)
        ref = found[-1]
        return cls(receipt, ref.trace_id, ref.observation_id, ref.url, usage)


_COLLECTORS: contextvars.ContextVar[tuple[list[TraceRef], ...]] = contextvars.ContextVar(
    "templiqx_langfuse_trace_collectors", default=()
)
_USAGE_SINKS: contextvars.ContextVar[tuple[list[dict[str, int]], ...]] = contextvars.ContextVar(
    "templiqx_langfuse_usage_sinks", default=()
)
_Found = TypeVar("_Found")


@contextmanager
def _collecting(sinks: contextvars.ContextVar[tuple[list[_Found], ...]]) -> Iterator[list[_Found]]:
    """A list every enclosing block's sink receives (blocks nest)."""
    found: list[_Found] = []
    with scoped(sinks, (*sinks.get(), found)):
        yield found


def collect_traces() -> AbstractContextManager[list[TraceRef]]:
    """Collect a ``TraceRef`` for every traced execution started inside the block: the
    receipt, a wire contract, carries no trace id (``runtime.execute_traced`` uses this)."""
    return _collecting(_COLLECTORS)


def collect_usage() -> AbstractContextManager[list[dict[str, int]]]:
    """Collect the token usage of every successful execution started inside the block
    (traced or not): the receipt is a wire contract and carries none."""
    return _collecting(_USAGE_SINKS)


class GenerationRecord:
    """The live generation of one execution; finish it exactly once."""

    def __init__(
        self,
        tracing: Tracing,
        handle: Generation | None,
        metadata: dict[str, Any],
        *,
        trace: dict[str, Any] | None = None,
        ref: TraceRef | None = None,
        repair: RepairAttempt | None = None,
        **fields: Any,
    ) -> None:
        self._tracing = tracing
        self._repair = repair  # the try of a repairing call this generation is
        self._handle = handle
        self._metadata = metadata
        self._trace = trace or {}  # trace-level attributes (root, or explicit trace updates)
        self.ref = ref
        self._fields = fields  # input, model and its parameters, sent with the final update
        self._usage_sinks = _USAGE_SINKS.get()  # the caller's, where the call started

    def finish(self, outcome: CallOutcome, *, first_token_at: datetime | None = None) -> None:
        """End the generation with the port's outcome of the call, whatever it is;
        ``first_token_at`` (streaming adapters) becomes ``completion_start_time``."""
        receipt, completion = outcome.receipt, outcome.details
        if receipt is None or not isinstance(completion, Completion):
            code = outcome.code or ""
            error, repair = outcome.error, self._repair
            repaired = repair is not None and error is not None and repair.repairs(error)
            self._finish(
                metadata={
                    **self._metadata,
                    META_ERROR_CODE: code,
                    META_ERROR_DETAIL: outcome.detail,
                },
                # An answer sent back for repair is an earlier try, not the call's failure.
                level="WARNING" if repaired else "ERROR",
                # The code, then why (a provider's own reason included): what the UI shows.
                status_message=f"{code}: {outcome.detail}" if outcome.detail else code,
                completion_start_time=first_token_at,
            )
            return
        valid = receipt.output_schema_valid
        model = completion.provider_model
        for sink in self._usage_sinks:
            sink.append(dict(completion.usage))
        score: dict[str, bool] = {}
        if self.ref is not None and self._handle is not None:
            pipeline = self._tracing.pipeline
            if pipeline is not None and pipeline.posts_scores:
                score["schema_valid"] = valid  # posted once the generation has arrived
            else:
                self._tracing.score_schema_validity(self.ref, valid)
        self._finish(
            **score,
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
            level=None if valid and not self._repaired(receipt) else "WARNING",
            status_message=None if valid else codes.OUTPUT_SCHEMA,
            completion_start_time=first_token_at,
        )

    def _repaired(self, receipt: ExecutionReceipt) -> bool:
        """A schema-valid output sent back for repair (it failed a host's own rules)."""
        return self._repair is not None and self._repair.repairs(receipt)

    def _finish(self, **update: Any) -> None:
        if self._handle is None:
            return
        handle, self._handle = self._handle, None
        redactor = self._tracing.redactor
        update = {k: v for k, v in {**self._fields, **update}.items() if v is not None}
        # Plain-text fields come from the provider too (a gateway may echo the key).
        for name in ("status_message", "model"):
            if isinstance(update.get(name), str):
                update[name] = redactor.text(update[name])
        if self._tracing.config.mask is not None:
            for name in ("output", "metadata"):  # the input was masked when serialized
                if name in update:
                    update[name] = self._tracing.masked(name, update[name])
            update = {k: v for k, v in update.items() if v is not None}
        # Tags are a list of strings: redacted item by item, as every string that leaves.
        trace = {
            k: redactor.value(v) if isinstance(v, (str, list, tuple)) else v
            for k, v in self._trace.items()
        }
        try:
            # Input, output and metadata are serialized and redacted in one pass each.
            handle.finish(trace, update, redactor.json_text)
        except Exception as error:  # tracing must never fail the call
            self._tracing.report_error("ending a generation", error)


_INPUT_CACHE_SIZE = 256
# Keys of what a repairing call's tries share (``RepairAttempt.notes``): the first try's
# generation, under which the others open, and each try's last generation.
_REPAIR_ANCHOR = "templiqx_langfuse.anchor"
_REPAIR_REF = "templiqx_langfuse.ref"


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
        #: Told where each traced execution lands as it starts (a surface's ``on_trace_url``).
        self.on_ref: Callable[[TraceRef], None] | None = None
        # Holding the interaction keeps its id from being reused while it is cached.
        self._inputs: OrderedDict[int, tuple[CompiledInteraction, JsonText]] = OrderedDict()
        self._inputs_lock = threading.Lock()
        self._recorder: Recorder | None = None
        if self.enabled:  # langfuse and OpenTelemetry are imported now, not mid-call
            from ._recording import Recorder

            self._recorder = Recorder(config, redactor.text)

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
        if not config.tracing:
            return cls(config, redactor)  # switched off on purpose: nothing to warn of
        if client is not None:
            return cls(config, redactor, client=client)
        if os.environ.get(ENV_OTEL_SDK_DISABLED, "").strip().lower() == "true":
            # OTel's TracerProvider reads it too and would record nothing, silently.
            logger.warning(
                "Langfuse tracing disabled: %s=true turns OpenTelemetry off; executions still run",
                ENV_OTEL_SDK_DISABLED,
            )
            return cls(config, redactor)
        if not config.enabled:
            logger.warning(
                "Langfuse tracing disabled: LANGFUSE_PUBLIC_KEY/LANGFUSE_SECRET_KEY not set; "
                "executions still run"
            )
            return cls(config, redactor)
        from ._export import ExportPipeline

        # Never a Langfuse client of its own: the SDK keeps one per public key for the
        # whole process (a host's would be handed over). The owned path shares nothing.
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

    def start(
        self,
        interaction: CompiledInteraction,
        *,
        model: str,
        model_parameters: Mapping[str, Any],
        request_fp: str,
        adapter: AdapterDescriptor,
        ignored_policy_keys: Sequence[str],
        strict: bool | None = None,
    ) -> GenerationRecord:
        """Open the generation (as root, or nested under the active span). The tries of a
        repairing call share one trace: later ones nest under the first try's generation
        and name the previous try's (``repair_of``)."""
        metadata: dict[str, Any] = {
            META_CONTRACT_ID: interaction.contract_id,
            META_CONTRACT_VERSION: interaction.contract_version,
            META_COMPILER: interaction.compiler,
            META_REQUEST_FINGERPRINT: request_fp,
            META_ADAPTER_ID: adapter.id,
            META_ADAPTER_VERSION: adapter.version,
            META_REQUESTED_MODEL: model,
            META_IGNORED_POLICY_KEYS: list(ignored_policy_keys),
            META_STRICT: strict,
        }
        repair = current_repair()
        opened = None
        if self._recorder is not None and self.enabled:
            try:
                opened = self._recorder.open(
                    interaction,
                    model,
                    pipeline=self.pipeline,
                    client=self.client,
                    within=None if repair is None else repair.notes.get(_REPAIR_ANCHOR),
                )
            except Exception as error:
                self.report_error("starting a generation", error)
        if opened is None:  # off, closed, failed or sampled out
            return GenerationRecord(self, None, metadata)
        handle, ref, trace = opened
        if repair is not None:
            notes = repair.notes
            notes.setdefault(_REPAIR_ANCHOR, handle.span)
            previous = notes.get((_REPAIR_REF, repair.number - 1))
            notes[(_REPAIR_REF, repair.number)] = ref
            if previous is not None:
                metadata[META_REPAIR_ATTEMPT] = repair.number
                metadata[META_REPAIR_OF] = previous.observation_id
        for collector in _COLLECTORS.get():
            collector.append(ref)
        if self.on_ref is not None:
            try:
                self.on_ref(ref)
            except Exception as error:  # a surface's callback never fails the call
                self.report_error("reporting a trace URL", error)
        return GenerationRecord(
            self,
            handle,
            metadata,
            trace=trace,
            ref=ref,
            input=self._input_json(interaction),
            model_parameters=dict(model_parameters),
            prompt=prompt_link(interaction.extensions)
            or linked_prompt(interaction.contract_id, interaction.contract_version),
            repair=repair,
        )

    def _input_json(self, interaction: CompiledInteraction) -> JsonText | None:
        """The messages as redacted JSON, once per (frozen, often re-executed) interaction;
        with a mask, masked afresh every call (a mask need not be pure)."""
        hit = self._inputs.get(id(interaction))
        if hit is not None and hit[0] is interaction:
            return hit[1]
        messages: Any = [{"role": m.role, "content": m.content} for m in interaction.messages]
        if self.config.mask is not None:
            messages = self.masked("input", messages)
            return None if messages is None else JsonText(self.redactor.json_text(messages))
        text = JsonText(self.redactor.json_text(messages))
        with self._inputs_lock:
            self._inputs[id(interaction)] = (interaction, text)
            if len(self._inputs) > _INPUT_CACHE_SIZE:
                self._inputs.popitem(last=False)
        return text

    def masked(self, field: str, data: Any) -> Any:
        """``data`` through the configured mask; None (the field is dropped) if it raises."""
        mask = self.config.mask
        assert mask is not None
        try:
            return mask(data=data)
        except Exception as error:  # a host's mask must never fail the call
            self.report_error(f"masking a generation's {field}", error)
            return None

    def score_schema_validity(self, ref: TraceRef, valid: bool) -> None:
        """A BOOLEAN score on the generation, through the host's client (the owned export
        path posts it from the generation's ``SCORE_ATTRIBUTE``)."""
        name = self.config.schema_score_name
        if name is None:
            return
        try:
            if self.client is not None:
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
