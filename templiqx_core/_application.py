"""The application flow: compile a contract, gate capabilities, execute, envelope, with the
envelopes and diagnostics of the Rust reference application (``templiqx-application``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import codes
from ._canonical import fingerprint
from ._compiler import Contract, check_plain, compile_contract, diagnostic, read_contract
from ._contracts import (
    CompiledInteraction,
    Diagnostic,
    ExecutionReceipt,
    ExecutionRequest,
    OperationEnvelope,
    RenderRequest,
    StreamEvent,
    TestCaseResult,
    TestReport,
)
from ._errors import PortError
from ._failures import to_diagnostic
from ._receipts import output_schema_diagnostics
from ._repair import RepairingRuntime, collect_attempts
from ._strict import to_strict_schema

if TYPE_CHECKING:
    from ._ports import RuntimeAdapter

CHECK_OPERATION = "check_contract"
COMPILE_OPERATION = "compile_contract"
EXECUTE_OPERATION = "execute_contract"
TEST_OPERATION = "test_package"


def compile_envelope(
    contract: Contract | str | Path,
    request: RenderRequest,
    *,
    capabilities: Iterable[str] | None = None,
) -> OperationEnvelope[CompiledInteraction]:
    """``compile_contract`` as the reference application: ``fingerprints.compiled_interaction``."""
    result = compile_contract(contract, request, capabilities)
    if result.interaction is None:
        return _envelope(COMPILE_OPERATION, None, result.diagnostics)
    fingerprints = {"compiled_interaction": fingerprint(result.interaction.to_json())}
    return _envelope(COMPILE_OPERATION, result.interaction, [], fingerprints)


_ADJUSTED = "adjusted in the strict form sent"
_NO_STRICT_FORM = "no strict form: sent non-strict under strict='auto', refused under strict=True"


def check_envelope(
    contract: str | Path, *, strict_schema: bool = False
) -> OperationEnvelope[dict[str, Any]]:
    """Check a contract and its eval fixtures; where its output schema is outside OpenAI's
    strict subset, a warning, or with ``strict_schema`` an error where no strict form exists."""
    parsed, diagnostics = read_contract(contract)
    if parsed is None:
        return _envelope(CHECK_OPERATION, None, diagnostics)
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
                message=f"{finding.rule} ({_ADJUSTED if finding.fixable else _NO_STRICT_FORM})",
                file=str(contract),
                json_pointer="/output_schema" + finding.pointer,
            )
            for finding in to_strict_schema(plain["output_schema"]).findings
        ]
    summary = {
        "contract_id": plain["id"],
        "contract_version": plain["version"],
        "evals": len(plain["evals"]),
    }
    errors = any(d.severity == "error" for d in found)
    return _envelope(CHECK_OPERATION, None if errors else summary, found)


def _envelope(
    operation: str,
    result: Any,
    diagnostics: list[Diagnostic],
    fingerprints: dict[str, str] | None = None,
    stream_events: list[StreamEvent] | None = None,
) -> OperationEnvelope[Any]:
    """``OperationEnvelope::new``: ok unless a diagnostic is an error."""
    return OperationEnvelope(
        operation=operation,
        ok=not any(d.severity == "error" for d in diagnostics),
        result=result,
        diagnostics=diagnostics,
        fingerprints=fingerprints or {},
        stream_events=stream_events or [],
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
    """The reference application's envelope, byte for byte, plus one diagnostic per failed
    schema rule; ``on_event`` raising cancels; ``repair=N`` wraps ``RepairingRuntime``."""
    compiled = compile_contract(contract, request, capabilities)
    if compiled.interaction is None:
        return _envelope(EXECUTE_OPERATION, None, compiled.diagnostics)
    interaction = compiled.interaction
    offered = set(runtime.descriptor().capabilities)
    missing = next((c for c in interaction.required_capabilities if c not in offered), None)
    if missing is not None:
        message = f"runtime lacks '{missing}'"
        diagnostic = _error(codes.RUNTIME_CAPABILITY_UNSUPPORTED, message, "/capabilities")
        return _envelope(EXECUTE_OPERATION, None, [diagnostic])

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
            envelope = _envelope(EXECUTE_OPERATION, None, [to_diagnostic(error)])
        else:
            diagnostics = []
            if not receipt.output_schema_valid:
                diagnostics = output_schema_diagnostics(interaction.output_schema, receipt.output)
            fingerprints = {
                "request": receipt.request_fingerprint,
                "output": receipt.output_fingerprint,
            }
            envelope = _envelope(EXECUTE_OPERATION, receipt, diagnostics, fingerprints, events)
    if repair is None:
        return envelope
    # One try (``repair=1``) is the runtime as it is, which reports nothing.
    return envelope.model_copy(update={"attempts": tries[-1] if tries else 1})


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
    """Every ``evals`` fixture run (else the parse diagnostics), by default on the declared
    capabilities: an eval checks the contract, not a deployment."""
    if not isinstance(contract, Contract):
        parsed, diagnostics = read_contract(contract)
        if parsed is None:
            return [], diagnostics
        contract = parsed
    from ._scripted import ScriptedRuntime, ScriptedSuccess  # not needed to compile

    targets = list(capabilities) if capabilities is not None else contract.declared_capabilities
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


def eval_envelope(
    contract: str | Path, *, capabilities: Iterable[str] | None = None
) -> OperationEnvelope[TestReport]:
    """The eval fixtures reported as the reference's ``test_package`` reports a package of one."""
    path = Path(contract)
    parsed, diagnostics = read_contract(path)
    if parsed is None:
        cases = [
            TestCaseResult(
                contract_id=path.stem,
                fixture_id="",
                passed=False,
                diagnostics=diagnostics,
                artifact_fingerprint=None,
            )
        ]
    else:
        results, _ = run_evals(parsed, capabilities=capabilities)
        cases = [
            TestCaseResult(
                contract_id=parsed.id,  # the report names the contract by id
                fixture_id=result.eval_id,
                passed=result.passed,
                diagnostics=result.envelope.diagnostics,
                artifact_fingerprint=result.envelope.fingerprints.get("output"),
            )
            for result in results
        ]
    passed = sum(case.passed for case in cases)
    failed = len(cases) - passed
    # The reference's layout is <package>/contracts/<contract>.yaml.
    package = path.parent.parent if path.parent.name == "contracts" else path.parent
    report = TestReport(package=package.name, passed=passed, failed=failed, cases=cases)
    summary = _error(codes.TEST_FAILED, f"{failed} fixture(s) failed", "/cases")
    return _envelope(TEST_OPERATION, report, [summary] if failed else [])


def _error(code: str, message: str, pointer: str) -> Diagnostic:
    return Diagnostic(code=code, severity="error", message=message, json_pointer=pointer)
