"""What a call carries into tracing and brings back (never imports langfuse or OTel: slow)."""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from templiqx_core import ExecutionReceipt
from templiqx_core.adapters import CallOutcome

from ._wire import Completion, Usage

#: The contract extension naming the Langfuse prompt a generation is linked to.
PROMPT_EXTENSION = "langfuse.prompt"
#: The capability that extension declares (the runtime offers it).
PROMPT_CAPABILITY = "langfuse_prompt"


class TraceAttributes(NamedTuple):
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class TraceRef:
    """Where one execution landed in Langfuse."""

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
    #: The tokens the call used, whenever the provider reported them (traced or not).
    usage: Usage | None = None

    @classmethod
    def of(
        cls,
        receipt: ExecutionReceipt,
        found: Sequence[TraceRef],
        used: Sequence[Mapping[str, int]] = (),
    ) -> TracedReceipt:
        """With the last trace and the last usage collected for the receipt."""
        usage = Usage.of(used[-1]) if used else None
        if not found:
            return cls(receipt, None, None, None, usage)
        ref = found[-1]
        return cls(receipt, ref.trace_id, ref.observation_id, ref.url, usage)


_T = TypeVar("_T")


@contextmanager
def scoped(var: contextvars.ContextVar[_T], value: _T) -> Iterator[None]:
    """``var`` is ``value`` for the calls started inside the block."""
    token = var.set(value)
    try:
        yield
    finally:
        var.reset(token)


#: Set by ``trace_attributes`` for the calls inside its block; read when one starts.
CALL_ATTRIBUTES: contextvars.ContextVar[TraceAttributes | None] = contextvars.ContextVar(
    "templiqx_langfuse_trace_attributes", default=None
)
#: ``langfuse.experiment.*`` attributes an eval runner sets for the calls of one case.
EXPERIMENT_ATTRIBUTES: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "templiqx_langfuse_experiment_attributes", default=None
)
#: The lists of the enclosing ``collect_traces``/``collect_usage`` blocks (they nest).
TRACE_COLLECTORS: contextvars.ContextVar[tuple[list[TraceRef], ...]] = contextvars.ContextVar(
    "templiqx_langfuse_trace_collectors", default=()
)
_USAGE_SINKS: contextvars.ContextVar[tuple[list[dict[str, int]], ...]] = contextvars.ContextVar(
    "templiqx_langfuse_usage_sinks", default=()
)


def trace_attributes(
    *, tags: Sequence[str] = (), session_id: str | None = None, user_id: str | None = None
) -> AbstractContextManager[None]:
    """Per-call trace attributes for executions inside the block (overrides configuration)."""
    return scoped(CALL_ATTRIBUTES, TraceAttributes(tuple(tags), session_id, user_id))


def experiment_attributes(attributes: Mapping[str, str] | None) -> AbstractContextManager[None]:
    """Executions started inside the block land as items of a Langfuse experiment."""
    return scoped(EXPERIMENT_ATTRIBUTES, dict(attributes) if attributes else None)


@contextmanager
def _collecting(sinks: contextvars.ContextVar[tuple[list[_T], ...]]) -> Iterator[list[_T]]:
    found: list[_T] = []
    with scoped(sinks, (*sinks.get(), found)):
        yield found


def collect_traces() -> AbstractContextManager[list[TraceRef]]:
    """A ``TraceRef`` per traced execution started inside the block (the receipt has none)."""
    return _collecting(TRACE_COLLECTORS)


def collect_usage() -> AbstractContextManager[list[dict[str, int]]]:
    """The token usage of every successful execution started inside the block."""
    return _collecting(_USAGE_SINKS)


class GenerationRecord:
    """An untraced execution: it only hands the usage to ``collect_usage``."""

    def __init__(self) -> None:
        self._usage_sinks = _USAGE_SINKS.get()  # the caller's, where the call started

    def finish(self, outcome: CallOutcome, *, first_token_at: datetime | None = None) -> None:
        if outcome.receipt is not None and isinstance(outcome.details, Completion):
            for sink in self._usage_sinks:
                sink.append(dict(outcome.details.usage))


def prompt_link(extensions: Mapping[str, Any]) -> tuple[str, int] | None:
    """``(name, version)`` from a contract's ``langfuse.prompt`` extension, if well formed."""
    value = extensions.get(PROMPT_EXTENSION)
    if not isinstance(value, dict):
        return None
    name, version = value.get("name"), value.get("version")
    if not isinstance(name, str) or not name.strip() or isinstance(version, bool):
        return None
    return (name, version) if isinstance(version, int) and version >= 1 else None


#: The prompt each (contract id, version) was fetched from, linked outside the interaction.
PROMPT_LINKS: dict[tuple[str, str], tuple[str, int]] = {}
