"""What a call carries into tracing: its trace attributes, experiment and where it landed.

A leaf imported by ``_tracing`` (every runtime) and ``_recording`` (tracing on).
"""

from __future__ import annotations

import contextvars
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import TypeVar

__all__ = [
    "CALL_ATTRIBUTES",
    "EXPERIMENT_ATTRIBUTES",
    "JsonText",
    "TraceAttributes",
    "TraceRef",
    "experiment_attributes",
    "scoped",
    "trace_attributes",
]


class JsonText(str):
    """A value already serialized (and redacted): written as it is."""


@dataclass(frozen=True)
class TraceAttributes:
    """Trace-level attributes: user, session and tags of the Langfuse trace."""

    tags: tuple[str, ...] = ()
    session_id: str | None = None
    user_id: str | None = None


@dataclass(frozen=True)
class TraceRef:
    """Where one execution landed in Langfuse: its trace, its generation, a URL if known."""

    trace_id: str
    observation_id: str
    url: str | None = None


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
#: Span attributes an eval runner sets for the calls of one case (Langfuse's
#: ``langfuse.experiment.*``); the generation also names itself the item's root observation.
EXPERIMENT_ATTRIBUTES: contextvars.ContextVar[Mapping[str, str] | None] = contextvars.ContextVar(
    "templiqx_langfuse_experiment_attributes", default=None
)


def trace_attributes(
    *, tags: Sequence[str] = (), session_id: str | None = None, user_id: str | None = None
) -> AbstractContextManager[None]:
    """Per-call trace attributes for executions inside the block (overrides configuration).

    They reach the trace wherever the generation lands: as the trace's own attributes
    when it is the root, as a trace update when it is nested under a host observation.
    """
    return scoped(CALL_ATTRIBUTES, TraceAttributes(tuple(tags), session_id, user_id))


def experiment_attributes(attributes: Mapping[str, str] | None) -> AbstractContextManager[None]:
    """Executions started inside the block land as items of a Langfuse experiment."""
    return scoped(EXPERIMENT_ATTRIBUTES, dict(attributes) if attributes else None)
