"""What an adapter author needs (a host needs only ``templiqx_core``).

Implement ``RuntimeAdapter.descriptor`` and ``RuntimeAdapter.produce_output`` (plus
``release`` if the adapter owns resources); the port builds the receipt, maps unexpected
errors, ends every stream with one terminal event and owns the lifecycle. Wrappers
(retrying, replaying, ...) derive from ``WrappingRuntime``. Check the result with
``templiqx_core.conformance``.
"""

from __future__ import annotations

from ._canonical import MAX_DEPTH, NotJson, canonical_json, fingerprint
from ._contracts import (
    AdapterDescriptor,
    DeltaEvent,
    ExecutionReceipt,
    ExecutionRequest,
    StreamEvent,
    ToolCallDeltaEvent,
)
from ._errors import PortError, RuntimeClosed
from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError
from ._ports import (
    CallOutcome,
    EventSink,
    Produced,
    RuntimeAdapter,
    RuntimeCall,
    WrappingRuntime,
    failed_event,
    project_terminal,
)
from ._receipts import build_receipt, request_fingerprint
from ._runtimes import ENTRY_POINT_GROUP, RuntimeFactory, RuntimeOptions
from ._schema import SchemaValidator, compile_schema
from .conformance import (
    CONFORMANCE_CHECKS,
    STREAMING_CHECKS,
    ConformanceError,
    ConformanceReport,
    check_adapter,
    check_streaming_adapter,
    run_check,
)

__all__ = [
    "CONFORMANCE_CHECKS",
    "ENTRY_POINT_GROUP",
    "MAX_DEPTH",
    "STREAMING_CHECKS",
    "AdapterDescriptor",
    "CallOutcome",
    "ConformanceError",
    "ConformanceReport",
    "DeltaEvent",
    "EventSink",
    "ExecutionReceipt",
    "ExecutionRequest",
    "NotJson",
    "PortError",
    "Produced",
    "RuntimeAdapter",
    "RuntimeCall",
    "RuntimeClosed",
    "RuntimeFactory",
    "RuntimeFailure",
    "RuntimeFailureCode",
    "RuntimeFailureError",
    "RuntimeOptions",
    "SchemaValidator",
    "StreamEvent",
    "ToolCallDeltaEvent",
    "WrappingRuntime",
    "build_receipt",
    "canonical_json",
    "check_adapter",
    "check_streaming_adapter",
    "compile_schema",
    "failed_event",
    "fingerprint",
    "project_terminal",
    "request_fingerprint",
    "run_check",
]
