"""templiqx_core: provider-neutral prompt contracts, fingerprints and the runtime port.

Never imports langfuse, httpx, vcrpy or any provider SDK: adapters live in their own
packages and plug in through ``RuntimeAdapter`` and the ``templiqx.runtimes`` entry points.
"""

from . import codes
from ._application import EvalResult, compile_envelope, execute_contract, run_evals
from ._canonical import canonical_json, fingerprint, fingerprint_bytes
from ._compiler import CompileResult, Contract, compile_contract
from ._contracts import (
    API_VERSION,
    AdapterDescriptor,
    CompiledInteraction,
    CompiledMessage,
    CompleteEvent,
    DeltaEvent,
    Diagnostic,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    OperationEnvelope,
    RenderRequest,
    Role,
    SourceSpan,
    StreamEvent,
    ToolCallDeltaEvent,
    parse_stream_event,
)
from ._errors import (
    Conflict,
    InvalidData,
    InvalidPath,
    IoFailure,
    NotFound,
    PortError,
    RuntimeClosed,
    Unsupported,
)
from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError, to_diagnostic
from ._ports import EventSink, RuntimeAdapter
from ._receipts import build_receipt, request_fingerprint
from ._scenarios import Scenario, load_inventory, load_scenario
from ._schema import compile_schema
from ._scripted import (
    ScriptedFailure,
    ScriptedOutcome,
    ScriptedRuntime,
    ScriptedSuccess,
    failure_receipt_fingerprint,
    success_receipt_fingerprint,
)
from ._version import __version__

__all__ = [
    "API_VERSION",
    "AdapterDescriptor",
    "CompileResult",
    "CompiledInteraction",
    "CompiledMessage",
    "CompleteEvent",
    "Conflict",
    "Contract",
    "DeltaEvent",
    "Diagnostic",
    "EvalResult",
    "EventSink",
    "ExecutionReceipt",
    "ExecutionRequest",
    "FailedEvent",
    "InvalidData",
    "InvalidPath",
    "IoFailure",
    "NotFound",
    "OperationEnvelope",
    "PortError",
    "RenderRequest",
    "Role",
    "RuntimeAdapter",
    "RuntimeClosed",
    "RuntimeFailure",
    "RuntimeFailureCode",
    "RuntimeFailureError",
    "Scenario",
    "ScriptedFailure",
    "ScriptedOutcome",
    "ScriptedRuntime",
    "ScriptedSuccess",
    "SourceSpan",
    "StreamEvent",
    "ToolCallDeltaEvent",
    "Unsupported",
    "__version__",
    "build_receipt",
    "canonical_json",
    "codes",
    "compile_contract",
    "compile_envelope",
    "compile_schema",
    "execute_contract",
    "failure_receipt_fingerprint",
    "fingerprint",
    "fingerprint_bytes",
    "load_inventory",
    "load_scenario",
    "parse_stream_event",
    "request_fingerprint",
    "run_evals",
    "success_receipt_fingerprint",
    "to_diagnostic",
]
