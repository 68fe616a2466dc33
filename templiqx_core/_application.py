"""The application flow: compile a contract, gate capabilities, execute, envelope (SPEC §8.2)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._canonical import fingerprint
from ._compiler import CompileResult, Contract, compile_contract, read_contract
from ._contracts import (
    CompiledInteraction,
    Diagnostic,
    ExecutionReceipt,
    ExecutionRequest,
    OperationEnvelope,
    RenderRequest,
    StreamEvent,
)
from ._errors import PortError
from ._failures import to_diagnostic
from ._ports import RuntimeAdapter
from ._scripted import ScriptedRuntime, ScriptedSuccess

__all__ = [
    "OUTPUT_SCHEMA_CODE",
    "RUNTIME_CAPABILITY_CODE",
    "EvalResult",
    "compile_envelope",
    "execute_contract",
    "run_evals",
]

OUTPUT_SCHEMA_CODE = "TQX_OUTPUT_SCHEMA"
RUNTIME_CAPABILITY_CODE = "TQX_RUNTIME_CAPABILITY_UNSUPPORTED"


def compile_envelope(
    contract: Contract | str | Path,
    request: RenderRequest,
    *,
    capabilities: Iterable[str],
) -> OperationEnvelope[CompiledInteraction]:
    """Compile and wrap the outcome in an envelope (``fingerprints.request`` when ok)."""
    result = compile_contract(contract, request, capabilities)
    return _compiled_envelope("compile", result)


def _compiled_envelope(operation: str, result: CompileResult) -> OperationEnvelope[Any]:
    if result.interaction is None:
        return OperationEnvelope(operation=operation, ok=False, diagnostics=result.diagnostics)
    request_fp = fingerprint(result.interaction.to_json())
    return OperationEnvelope(
        operation=operation,
        ok=True,
        result=result.interaction,
        fingerprints={"request": request_fp},
    )


def execute_contract(
    contract: Contract | str | Path,
    request: RenderRequest,
    *,
    runtime: RuntimeAdapter,
    capabilities: Iterable[str],
    fixture_output: Any = None,
    stream: bool = False,
    on_event: Callable[[StreamEvent], None] | None = None,
) -> OperationEnvelope[ExecutionReceipt]:
    """Compile ``contract`` for ``request`` and execute it on ``runtime``.

    Refuses (``TQX_RUNTIME_CAPABILITY_UNSUPPORTED``) when the runtime lacks a capability
    the compiled interaction requires. A ``PortError`` from the runtime becomes one
    diagnostic; an exception raised by ``on_event`` propagates (that is how a host cancels).
    """
    compiled = compile_contract(contract, request, capabilities)
    if compiled.interaction is None:
        return OperationEnvelope(operation="execute", ok=False, diagnostics=compiled.diagnostics)
    interaction = compiled.interaction
    fingerprints = {"request": fingerprint(interaction.to_json())}
    descriptor = runtime.descriptor()
    missing = sorted(set(interaction.required_capabilities) - set(descriptor.capabilities))
    if missing:
        message = (
            f"runtime {descriptor.id} {descriptor.version} lacks required "
            f"capabilities: {', '.join(missing)}"
        )
        diagnostic = Diagnostic(code=RUNTIME_CAPABILITY_CODE, severity="error", message=message)
        return OperationEnvelope(
            operation="execute", ok=False, diagnostics=[diagnostic], fingerprints=fingerprints
        )

    execution = ExecutionRequest(interaction=interaction, fixture_output=fixture_output)
    events: list[StreamEvent] = []

    def sink(event: StreamEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    try:
        receipt = (
            runtime.execute_streaming(execution, sink) if stream else runtime.execute(execution)
        )
    except PortError as error:
        return OperationEnvelope(
            operation="execute",
            ok=False,
            diagnostics=[to_diagnostic(error)],
            fingerprints=fingerprints,
            stream_events=events,
        )
    fingerprints["output"] = receipt.output_fingerprint
    diagnostics = []
    if not receipt.output_schema_valid:
        diagnostics.append(
            Diagnostic(
                code=OUTPUT_SCHEMA_CODE,
                severity="error",
                message=f"output of {interaction.contract_id} does not match its output_schema",
            )
        )
    return OperationEnvelope(
        operation="execute",
        ok=not diagnostics,
        result=receipt,
        diagnostics=diagnostics,
        fingerprints=fingerprints,
        stream_events=events,
    )


@dataclass(frozen=True)
class EvalResult:
    """One eval fixture run through the scripted runtime."""

    eval_id: str
    envelope: OperationEnvelope[ExecutionReceipt]

    @property
    def passed(self) -> bool:
        return self.envelope.ok


def run_evals(
    contract: Contract | str | Path, *, capabilities: Iterable[str] | None = None
) -> tuple[list[EvalResult], list[Diagnostic]]:
    """Run every ``evals`` fixture of a contract; the contract's own parse diagnostics if any.

    Targets default to the contract's declared capabilities, so an eval checks the
    contract, not a deployment.
    """
    if not isinstance(contract, Contract):
        parsed, diagnostics = read_contract(contract)
        if parsed is None:
            return [], diagnostics
        contract = parsed
    targets = list(capabilities) if capabilities is not None else list(contract.capabilities)
    targets += [ext.capability for ext in contract.extensions.values()]
    runtime = ScriptedRuntime([ScriptedSuccess()], capabilities=targets)
    results = []
    for case in contract.evals:
        request = RenderRequest(inputs=case.inputs, context=case.context)
        envelope = execute_contract(
            contract,
            request,
            runtime=runtime,
            capabilities=targets,
            fixture_output=case.fake_output,
        )
        results.append(EvalResult(case.id, envelope))
    return results, []
