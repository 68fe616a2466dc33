"""templiqx_core: provider-neutral prompt contracts, fingerprints and the runtime port.

Never imports langfuse, httpx, vcrpy or any provider SDK: adapters live in their own
packages and plug in through ``RuntimeAdapter`` and the ``templiqx.runtimes`` entry points.
"""

from ._version import __version__
from .application import EvalResult, compile_envelope, execute_contract, run_evals
from .canonical import canonical_json, fingerprint, fingerprint_bytes
from .compiler import CompileResult, Contract, compile_contract
from .contracts import (
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
from .errors import (
    Conflict,
    InvalidData,
    InvalidPath,
    IoFailure,
    NotFound,
    PortError,
    Unsupported,
)
from .failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError, to_diagnostic
from .ports import EventSink, RuntimeAdapter
from .receipts import build_receipt, request_fingerprint
from .scenarios import Scenario, load_inventory, load_scenario
from .schema import compile_schema
from .scripted import ScriptedFailure, ScriptedOutcome, ScriptedRuntime, ScriptedSuccess

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
    "compile_contract",
    "compile_envelope",
    "compile_schema",
    "execute_contract",
    "fingerprint",
    "fingerprint_bytes",
    "load_inventory",
    "load_scenario",
    "parse_stream_event",
    "request_fingerprint",
    "run_evals",
    "to_diagnostic",
]
