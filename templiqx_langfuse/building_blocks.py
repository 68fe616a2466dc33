"""The parts ``LangfuseTracedRuntime`` is built from, for host adapters of the same endpoints
(streaming, say): reused, they keep its request bytes, bounds, failures, secrets and generations."""

from ._deadline import aopen_bounded, deadline_at, open_bounded
from ._host import HostWiring, WiringOptions
from ._wire import MAX_RESPONSE_BYTES, Completion, WireFailure, failure_for_status, parse_completion

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
