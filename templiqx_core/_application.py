"""The application flow: compile a contract, gate capabilities, execute, envelope, with the
envelopes and diagnostics of the Rust reference application (``templiqx-application``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from . import codes
from ._canonical import fingerprint
from ._compiler import Contract, check_plain, compile_contract, diagnostic, read_contract
from ._contracts import (
    CompiledInteraction,
    Diagnostic,
    ExecutionReceipt,
    ExecutionRequest,
    FixtureReport,
    FixtureResult,
    OperationEnvelope,
    RenderRequest,
    StreamEvent,
)
from ._errors import PortError
from ._failures import to_diagnostic
from ._ports import RuntimeAdapter
from ._receipts import output_schema_diagnostics
from ._repair import RepairingRuntime, collect_attempts
from ._strict import to_strict_schema


def compile_envelope(
    contract: Contract | str | Path,
    request: RenderRequest,
    *,
    capabilities: Iterable[str] | None = None,
) -> OperationEnvelope[CompiledInteraction]:
    """``compile_contract`` as the reference application: ``fingerprints.compiled_interaction``."""
    result = compile_contract(contract, request, capabilities)
    if result.interaction is None:
        return _envelope("compile_contract", None, result.diagnostics)
    fingerprints = {"compiled_interaction": fingerprint(result.interaction.to_json())}
    return _envelope("compile_contract", result.interaction, [], fingerprints=fingerprints)


def check_envelope(
    contract: str | Path, *, strict_schema: bool = False
) -> OperationEnvelope[dict[str, Any]]:
    """A contract and its eval fixtures checked; an output schema outside OpenAI's strict subset
    is a warning (with ``strict_schema``, an error where it has no strict form)."""
    parsed, diagnostics = read_contract(contract)
    if parsed is None:
        return _envelope("check_contract", None, diagnostics)
    plain = parsed.model_dump(by_alias=True)
    evals, first = plain["evals"], dict[str, int]()  # results, --resume, items key on eval ids
    items = [
        *check_plain(plain),
        *(
            diagnostic(
                codes.DATA_INVALID,
                f"eval id {case['id']!r} appears twice (first at /evals/{first[case['id']]})",
                f"/evals/{i}/id",
            )
            for i, case in enumerate(evals)
            if first.setdefault(case["id"], i) != i
        ),
    ]
    found = [*diagnostics, *(Diagnostic(**item, file=str(contract)) for item in items)]
    if not found:
        found = [
            Diagnostic(
                code=codes.OUTPUT_SCHEMA_STRICT,
                severity="error" if strict_schema and not finding.fixable else "warning",
                message=f"{finding.rule} ({'adjusted' if finding.fixable else 'no strict form'})",
                file=str(contract),
                json_pointer="/output_schema" + finding.pointer,
            )
            for finding in to_strict_schema(plain["output_schema"]).findings
        ]
    summary = {
        "contract_id": plain["id"],
        "contract_version": plain["version"],
        "evals": len(evals),
    }
    errors = any(d.severity == "error" for d in found)
    return _envelope("check_contract", None if errors else summary, found)


def _envelope(
    operation: str, result: Any, diagnostics: list[Diagnostic], **more: Any
) -> OperationEnvelope[Any]:
    """``OperationEnvelope::new``: ok unless a diagnostic is an error."""
    ok = not any(d.severity == "error" for d in diagnostics)
    return OperationEnvelope(
        operation=operation, ok=ok, result=result, diagnostics=diagnostics, **more
    )


def execute_contract(
    contract: Contract | str | Path,
    request: RenderRequest,
    *,
    runtime: RuntimeAdapter,
    capabilities: Iterable[str] | None = None,
    fixture_output: Any = None,
    stream: bool = False,
    on_event: Callable[[StreamEvent], None] | None = None,
    repair: int | None = None,
) -> OperationEnvelope[ExecutionReceipt]:
    """The reference application's envelope, plus one diagnostic per failed schema rule;
    ``on_event`` raising cancels; ``repair=N`` wraps ``RepairingRuntime``."""
    compiled = compile_contract(contract, request, capabilities)
    if compiled.interaction is None:
        return _envelope("execute_contract", None, compiled.diagnostics)
    interaction = compiled.interaction
    offered = set(runtime.descriptor().capabilities)
    missing = next((c for c in interaction.required_capabilities if c not in offered), None)
    if missing is not None:
        lacks = f"runtime lacks '{missing}'"
        gate = _error(codes.RUNTIME_CAPABILITY_UNSUPPORTED, lacks, "/capabilities")
        return _envelope("execute_contract", None, [gate])
    execution = ExecutionRequest(interaction=interaction, fixture_output=fixture_output)
    events: list[StreamEvent] = []

    def sink(event: StreamEvent) -> None:
        events.append(event)
        if on_event is not None:
            on_event(event)

    if repair is not None:
        runtime = RepairingRuntime(runtime, attempts=repair)
    with collect_attempts() as tries:
        try:
            receipt = (
                runtime.execute_streaming(execution, sink) if stream else runtime.execute(execution)
            )
        except PortError as error:
            envelope = _envelope("execute_contract", None, [to_diagnostic(error)])
        else:
            diagnostics = []
            if not receipt.output_schema_valid:
                diagnostics = output_schema_diagnostics(interaction.output_schema, receipt.output)
            fingerprints = dict(
                request=receipt.request_fingerprint, output=receipt.output_fingerprint
            )
            envelope = _envelope(
                "execute_contract",
                receipt,
                diagnostics,
                fingerprints=fingerprints,
                stream_events=events,
            )
    if repair is None:
        return envelope
    # One try (``repair=1``) is the runtime as it is, which reports nothing.
    return envelope.model_copy(update={"attempts": tries[-1] if tries else 1})


def eval_envelope(
    contract: str | Path, *, capabilities: Iterable[str] | None = None
) -> OperationEnvelope[FixtureReport]:
    """Every eval fixture run on the scripted runtime, by default on the declared capabilities
    (an eval checks the contract, not a deployment), as the reference's ``test_package``."""
    from ._scripted import ScriptedRuntime, ScriptedSuccess  # not needed to compile

    def outcome(contract_id: str, fixture_id: str, ran: OperationEnvelope[Any]) -> FixtureResult:
        return FixtureResult(
            contract_id=contract_id,
            fixture_id=fixture_id,
            passed=ran.ok,
            diagnostics=ran.diagnostics,
            artifact_fingerprint=ran.fingerprints.get("output"),
        )

    path = Path(contract)
    parsed, diagnostics = read_contract(path)
    if parsed is None:  # one failed case, named after the file
        cases = [outcome(path.stem, "", _envelope("test_package", None, diagnostics))]
    else:
        targets = list(capabilities) if capabilities is not None else parsed.declared_capabilities
        runtime = ScriptedRuntime([ScriptedSuccess()], capabilities=targets)
        cases = [
            outcome(
                parsed.id,  # the report names the contract by id
                case.id,
                execute_contract(
                    parsed,
                    RenderRequest(inputs=case.inputs, context=case.context),
                    runtime=runtime,
                    capabilities=targets,
                    fixture_output=case.fake_output,
                ),
            )
            for case in parsed.evals
        ]
    passed = sum(case.passed for case in cases)
    failed = len(cases) - passed
    # The reference's layout is <package>/contracts/<contract>.yaml.
    package = path.parent.parent if path.parent.name == "contracts" else path.parent
    report = FixtureReport(package=package.name, passed=passed, failed=failed, cases=cases)
    summary = _error(codes.TEST_FAILED, f"{failed} fixture(s) failed", "/cases")
    return _envelope("test_package", report, [summary] if failed else [])


def _error(code: str, message: str, pointer: str) -> Diagnostic:
    return Diagnostic(code=code, severity="error", message=message, json_pointer=pointer)
