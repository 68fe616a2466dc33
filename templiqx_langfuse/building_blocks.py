"""The parts ``LangfuseTracedRuntime`` is built from, for host adapters of the same endpoints.

A host adapter that talks to an OpenAI-compatible endpoint in another way (streaming, say)
reuses these instead of copying them, so it keeps the same request bytes, the same bounded
transport, sync and async (one deadline for the whole round trip, a size bound on the
body), the same
failure mapping, the same secret rules and the same Langfuse generations as the Langfuse
adapter. ``HostWiring`` builds (and releases) the shared ones; the adapter keeps only its
own wire handling.
"""

from ._deadline import AsyncDeadlineTransport, DeadlineTransport, deadline_at
from ._host import HostWiring, WiringOptions
from ._redaction import REDACTED, RedactingLogFilter, Redactor
from ._tracing import GenerationRecord, Tracing
from ._transport import BoundedStream, aopen_bounded, open_bounded
from ._wire import (
    MAX_RESPONSE_BYTES,
    Completion,
    RequestBody,
    WireFailure,
    build_request_body,
    failure_for_status,
    parse_completion,
    usage_details,
)

__all__ = [
    "MAX_RESPONSE_BYTES",
    "REDACTED",
    "AsyncDeadlineTransport",
    "BoundedStream",
    "Completion",
    "DeadlineTransport",
    "GenerationRecord",
    "HostWiring",
    "RedactingLogFilter",
    "Redactor",
    "RequestBody",
    "Tracing",
    "WireFailure",
    "WiringOptions",
    "aopen_bounded",
    "build_request_body",
    "deadline_at",
    "failure_for_status",
    "open_bounded",
    "parse_completion",
    "usage_details",
]
