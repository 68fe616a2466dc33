"""The parts ``LangfuseTracedRuntime`` is built from, for host adapters of the same endpoints.

A host adapter that talks to an OpenAI-compatible endpoint another way (streaming, say)
reuses these rather than copying them, and so keeps the Langfuse adapter's request bytes,
bounded transport (sync and async), failure mapping, secret rules and generations.
``HostWiring`` builds and releases the shared ones. Transports, ``Redactor`` and
``REDACTED`` are in ``templiqx_langfuse`` itself.
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
