"""The parts ``LangfuseTracedRuntime`` is built from, for host adapters of the same endpoints.

A host adapter that talks to an OpenAI-compatible endpoint in another way (streaming, say)
reuses these instead of copying them, so it keeps the same request bytes, the same bounded
transport, sync and async (one deadline for the whole round trip, a size bound on the
body), the same failure mapping, the same secret rules and the same Langfuse generations
as the Langfuse adapter. ``HostWiring`` builds (and releases) the shared ones; the adapter
keeps only its own wire handling. Transports, ``Redactor`` and ``REDACTED`` are in
``templiqx_langfuse`` itself.
"""

from ._deadline import deadline_at
from ._host import HostWiring, WiringOptions
from ._transport import aopen_bounded, open_bounded
from ._wire import (
    MAX_RESPONSE_BYTES,
    Completion,
    WireFailure,
    failure_for_status,
    parse_completion,
)

__all__ = [
    "MAX_RESPONSE_BYTES",
    "Completion",
    "HostWiring",
    "WireFailure",
    "WiringOptions",
    "aopen_bounded",
    "deadline_at",
    "failure_for_status",
    "open_bounded",
    "parse_completion",
]
