"""Provider-neutral prompt contracts, fingerprints and the runtime port (adapter authors' extras:
``templiqx_core.adapters``). Names load on first use (PEP 562): the CLI starts without pydantic."""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from . import codes
from ._errors import (
    InvalidData,
    InvalidPath,
    IoFailure,
    NotFound,
    OutputSchemaError,
    OutputTypeError,
    PortError,
    RuntimeClosed,
    Unsupported,
)
from ._version import __version__

if _typing.TYPE_CHECKING:
    from ._application import check_envelope, compile_envelope, execute_contract
    from ._canonical import canonical_json, fingerprint
    from ._compiler import (
        CONTRACT_SCHEMA_PATH,
        CompileResult,
        Contract,
        compile_contract,
        parse_contract,
        read_contract,
    )
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
    )
    from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError, to_diagnostic
    from ._ports import EventSink, RuntimeAdapter
    from ._repair import RepairingRuntime, collect_attempts
    from ._scenarios import Scenario, load_inventory, load_scenario
    from ._scripted import ScriptedFailure, ScriptedOutcome, ScriptedRuntime, ScriptedSuccess
    from ._strict import (
        OutputSchemaStrictError,
        StrictFinding,
        StrictForm,
        model_output_schema,
        to_strict_schema,
    )
    from ._typed import TypedContract, TypedContractError, check_output_model

# Type checkers read the imports above; at run time this map loads each name on first use.
_WHERE = {
    name: module
    for module, names in {
        "._application": "check_envelope compile_envelope execute_contract",
        "._canonical": "canonical_json fingerprint",
        "._compiler": "CONTRACT_SCHEMA_PATH CompileResult Contract compile_contract "
        "parse_contract read_contract",
        "._contracts": "API_VERSION AdapterDescriptor CompiledInteraction CompiledMessage "
        "CompleteEvent DeltaEvent Diagnostic ExecutionReceipt ExecutionRequest FailedEvent "
        "OperationEnvelope RenderRequest Role SourceSpan StreamEvent ToolCallDeltaEvent",
        "._failures": "RuntimeFailure RuntimeFailureCode RuntimeFailureError to_diagnostic",
        "._ports": "EventSink RuntimeAdapter",
        "._repair": "RepairingRuntime collect_attempts",
        "._scenarios": "Scenario load_inventory load_scenario",
        "._scripted": "ScriptedFailure ScriptedOutcome ScriptedRuntime ScriptedSuccess",
        "._strict": "OutputSchemaStrictError StrictFinding StrictForm model_output_schema "
        "to_strict_schema",
        "._typed": "TypedContract TypedContractError check_output_model",
    }.items()
    for name in names.split()
}
__all__ = [
    "API_VERSION",
    "CONTRACT_SCHEMA_PATH",
    "AdapterDescriptor",
    "CompileResult",
    "CompiledInteraction",
    "CompiledMessage",
    "CompleteEvent",
    "Contract",
    "DeltaEvent",
    "Diagnostic",
    "EventSink",
    "ExecutionReceipt",
    "ExecutionRequest",
    "FailedEvent",
    "InvalidData",
    "InvalidPath",
    "IoFailure",
    "NotFound",
    "OperationEnvelope",
    "OutputSchemaError",
    "OutputSchemaStrictError",
    "OutputTypeError",
    "PortError",
    "RenderRequest",
    "RepairingRuntime",
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
    "StrictFinding",
    "StrictForm",
    "ToolCallDeltaEvent",
    "TypedContract",
    "TypedContractError",
    "Unsupported",
    "__version__",
    "canonical_json",
    "check_envelope",
    "check_output_model",
    "codes",
    "collect_attempts",
    "compile_contract",
    "compile_envelope",
    "execute_contract",
    "fingerprint",
    "load_inventory",
    "load_scenario",
    "model_output_schema",
    "parse_contract",
    "read_contract",
    "to_diagnostic",
    "to_strict_schema",
]

if not _typing.TYPE_CHECKING:  # type checkers see the imports above: a typo stays an error

    def __getattr__(name: str) -> object:
        if name not in _WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = _importlib.import_module(_WHERE[name], __name__)
        return globals().setdefault(name, getattr(module, name))  # a plain attribute from now on
