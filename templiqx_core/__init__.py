"""templiqx_core: provider-neutral prompt contracts, fingerprints and the runtime port.

What a host needs; an adapter author's extras live in ``templiqx_core.adapters``. Names load
on first use (PEP 562), so the CLI starts without pydantic; the errors load with the package.
The map below is the one list of them: type checkers read the imports under TYPE_CHECKING.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from . import _errors
from . import codes as codes
from ._errors import InvalidData as InvalidData
from ._errors import InvalidPath as InvalidPath
from ._errors import IoFailure as IoFailure
from ._errors import NotFound as NotFound
from ._errors import OutputSchemaError as OutputSchemaError
from ._errors import OutputTypeError as OutputTypeError
from ._errors import PortError as PortError
from ._errors import RuntimeClosed as RuntimeClosed
from ._errors import Unsupported as Unsupported
from ._version import __version__ as __version__

if _typing.TYPE_CHECKING:
    from ._application import EvalResult as EvalResult
    from ._application import check_envelope as check_envelope
    from ._application import compile_envelope as compile_envelope
    from ._application import execute_contract as execute_contract
    from ._application import run_evals as run_evals
    from ._canonical import canonical_json as canonical_json
    from ._canonical import fingerprint as fingerprint
    from ._canonical import fingerprint_bytes as fingerprint_bytes
    from ._compiler import CONTRACT_SCHEMA_PATH as CONTRACT_SCHEMA_PATH
    from ._compiler import CompileResult as CompileResult
    from ._compiler import Contract as Contract
    from ._compiler import compile_contract as compile_contract
    from ._compiler import parse_contract as parse_contract
    from ._compiler import read_contract as read_contract
    from ._contracts import API_VERSION as API_VERSION
    from ._contracts import AdapterDescriptor as AdapterDescriptor
    from ._contracts import CompiledInteraction as CompiledInteraction
    from ._contracts import CompiledMessage as CompiledMessage
    from ._contracts import CompleteEvent as CompleteEvent
    from ._contracts import DeltaEvent as DeltaEvent
    from ._contracts import Diagnostic as Diagnostic
    from ._contracts import ExecutionReceipt as ExecutionReceipt
    from ._contracts import ExecutionRequest as ExecutionRequest
    from ._contracts import FailedEvent as FailedEvent
    from ._contracts import OperationEnvelope as OperationEnvelope
    from ._contracts import RenderRequest as RenderRequest
    from ._contracts import Role as Role
    from ._contracts import SourceSpan as SourceSpan
    from ._contracts import StreamEvent as StreamEvent
    from ._contracts import ToolCallDeltaEvent as ToolCallDeltaEvent
    from ._contracts import parse_stream_event as parse_stream_event
    from ._failures import RuntimeFailure as RuntimeFailure
    from ._failures import RuntimeFailureCode as RuntimeFailureCode
    from ._failures import RuntimeFailureError as RuntimeFailureError
    from ._failures import to_diagnostic as to_diagnostic
    from ._ports import EventSink as EventSink
    from ._ports import RuntimeAdapter as RuntimeAdapter
    from ._repair import RepairingRuntime as RepairingRuntime
    from ._repair import collect_attempts as collect_attempts
    from ._scenarios import Scenario as Scenario
    from ._scenarios import load_inventory as load_inventory
    from ._scenarios import load_scenario as load_scenario
    from ._scripted import ScriptedFailure as ScriptedFailure
    from ._scripted import ScriptedOutcome as ScriptedOutcome
    from ._scripted import ScriptedRuntime as ScriptedRuntime
    from ._scripted import ScriptedSuccess as ScriptedSuccess
    from ._scripted import failure_receipt_fingerprint as failure_receipt_fingerprint
    from ._scripted import success_receipt_fingerprint as success_receipt_fingerprint
    from ._strict import OutputSchemaStrictError as OutputSchemaStrictError
    from ._strict import StrictFinding as StrictFinding
    from ._strict import StrictForm as StrictForm
    from ._strict import model_output_schema as model_output_schema
    from ._strict import require_strict_schema as require_strict_schema
    from ._strict import strict_findings as strict_findings
    from ._strict import to_strict_schema as to_strict_schema
    from ._typed import TypedContract as TypedContract
    from ._typed import TypedContractError as TypedContractError
    from ._typed import check_output_model as check_output_model

_WHERE = {
    name: module
    for module, names in {
        "._application": "EvalResult check_envelope compile_envelope execute_contract run_evals",
        "._canonical": "canonical_json fingerprint fingerprint_bytes",
        "._compiler": "CONTRACT_SCHEMA_PATH CompileResult Contract compile_contract "
        "parse_contract read_contract",
        "._contracts": "API_VERSION AdapterDescriptor CompiledInteraction CompiledMessage "
        "CompleteEvent DeltaEvent Diagnostic ExecutionReceipt ExecutionRequest FailedEvent "
        "OperationEnvelope RenderRequest Role SourceSpan StreamEvent ToolCallDeltaEvent "
        "parse_stream_event",
        "._failures": "RuntimeFailure RuntimeFailureCode RuntimeFailureError to_diagnostic",
        "._ports": "EventSink RuntimeAdapter",
        "._repair": "RepairingRuntime collect_attempts",
        "._scenarios": "Scenario load_inventory load_scenario",
        "._scripted": "ScriptedFailure ScriptedOutcome ScriptedRuntime ScriptedSuccess "
        "failure_receipt_fingerprint success_receipt_fingerprint",
        "._strict": "OutputSchemaStrictError StrictFinding StrictForm model_output_schema "
        "require_strict_schema strict_findings to_strict_schema",
        "._typed": "TypedContract TypedContractError check_output_model",
    }.items()
    for name in names.split()
}
__all__ = sorted([*_WHERE, *_errors.__all__, "__version__", "codes"])

if not _typing.TYPE_CHECKING:  # type checkers see the imports above: a typo stays an error

    def __getattr__(name: str) -> object:
        """A public name, imported from its module on first use (then a plain attribute)."""
        if name not in _WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = globals()[name] = getattr(_importlib.import_module(_WHERE[name], __name__), name)
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_WHERE})
