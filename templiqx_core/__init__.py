"""templiqx_core: provider-neutral prompt contracts, fingerprints and the runtime port.

Never imports langfuse, httpx, vcrpy or any provider SDK: adapters live in their own
packages and plug in through ``RuntimeAdapter`` and the ``templiqx.runtimes`` entry points.

This namespace is what a host needs: contracts, the compiler and application flow, the
wire models, errors (every code in ``templiqx_core.codes``), fingerprints and the
``RuntimeAdapter`` it calls. What an adapter author needs besides (``build_receipt``,
``request_fingerprint``, ``compile_schema``, the hook types, the conformance kit) lives in
``templiqx_core.adapters``.

Names load on first use (PEP 562), so a command that needs only part of the package (the
CLI's ``--help`` or ``fingerprint``) does not pay for pydantic models it never touches.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from . import codes
    from ._application import (
        EvalResult,
        check_envelope,
        compile_envelope,
        execute_contract,
        run_evals,
    )
    from ._canonical import canonical_json, fingerprint, fingerprint_bytes
    from ._compiler import CompileResult, Contract, compile_contract
    from ._compiler.check import CONTRACT_SCHEMA_PATH
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
        OutputSchemaError,
        OutputTypeError,
        PortError,
        RuntimeClosed,
        Unsupported,
    )
    from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError, to_diagnostic
    from ._ports import EventSink, RuntimeAdapter
    from ._scenarios import Scenario, load_inventory, load_scenario
    from ._scripted import (
        ScriptedFailure,
        ScriptedOutcome,
        ScriptedRuntime,
        ScriptedSuccess,
        failure_receipt_fingerprint,
        success_receipt_fingerprint,
    )
    from ._typed import check_output_model, output_as, output_schema_for
    from ._version import __version__

_WHERE: dict[str, str] = {
    "codes": ".codes",
    "EvalResult": "._application",
    "check_envelope": "._application",
    "compile_envelope": "._application",
    "execute_contract": "._application",
    "run_evals": "._application",
    "canonical_json": "._canonical",
    "fingerprint": "._canonical",
    "fingerprint_bytes": "._canonical",
    "CompileResult": "._compiler",
    "Contract": "._compiler",
    "compile_contract": "._compiler",
    "CONTRACT_SCHEMA_PATH": "._compiler.check",
    "API_VERSION": "._contracts",
    "AdapterDescriptor": "._contracts",
    "CompiledInteraction": "._contracts",
    "CompiledMessage": "._contracts",
    "CompleteEvent": "._contracts",
    "DeltaEvent": "._contracts",
    "Diagnostic": "._contracts",
    "ExecutionReceipt": "._contracts",
    "ExecutionRequest": "._contracts",
    "FailedEvent": "._contracts",
    "OperationEnvelope": "._contracts",
    "RenderRequest": "._contracts",
    "Role": "._contracts",
    "SourceSpan": "._contracts",
    "StreamEvent": "._contracts",
    "ToolCallDeltaEvent": "._contracts",
    "parse_stream_event": "._contracts",
    "Conflict": "._errors",
    "InvalidData": "._errors",
    "InvalidPath": "._errors",
    "IoFailure": "._errors",
    "NotFound": "._errors",
    "OutputSchemaError": "._errors",
    "OutputTypeError": "._errors",
    "PortError": "._errors",
    "RuntimeClosed": "._errors",
    "Unsupported": "._errors",
    "RuntimeFailure": "._failures",
    "RuntimeFailureCode": "._failures",
    "RuntimeFailureError": "._failures",
    "to_diagnostic": "._failures",
    "EventSink": "._ports",
    "RuntimeAdapter": "._ports",
    "Scenario": "._scenarios",
    "load_inventory": "._scenarios",
    "load_scenario": "._scenarios",
    "ScriptedFailure": "._scripted",
    "ScriptedOutcome": "._scripted",
    "ScriptedRuntime": "._scripted",
    "ScriptedSuccess": "._scripted",
    "failure_receipt_fingerprint": "._scripted",
    "success_receipt_fingerprint": "._scripted",
    "check_output_model": "._typed",
    "output_as": "._typed",
    "output_schema_for": "._typed",
    "__version__": "._version",
}


def __getattr__(name: str) -> _Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'templiqx_core' has no attribute {name!r}")
    loaded = _importlib.import_module(module, __name__)
    value = loaded if module == f".{name}" else getattr(loaded, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "API_VERSION",
    "CONTRACT_SCHEMA_PATH",
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
    "OutputSchemaError",
    "OutputTypeError",
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
    "canonical_json",
    "check_envelope",
    "check_output_model",
    "codes",
    "compile_contract",
    "compile_envelope",
    "execute_contract",
    "failure_receipt_fingerprint",
    "fingerprint",
    "fingerprint_bytes",
    "load_inventory",
    "load_scenario",
    "output_as",
    "output_schema_for",
    "parse_stream_event",
    "run_evals",
    "success_receipt_fingerprint",
    "to_diagnostic",
]
