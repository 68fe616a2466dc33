"""The ``templiqx/v1alpha1`` contract compiler.

``compile_contract`` never raises for a bad contract or bad values: it returns the
diagnostics, each with a stable code and a JSON pointer into the contract or request.

The ``Contract`` model is the one check of a contract document; the compiler proper
(``core.compile_plain``) works on the validated model dumped as plain data, and this
public face wraps what it returns in the wire models.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .._contracts import CompiledInteraction, CompiledMessage, Diagnostic, RenderRequest
from .core import COMPILER_ID, compile_plain
from .model import CONTRACT_SCHEMA_PATH, Contract, EvalCase
from .parse import parse_contract, read_contract

__all__ = [
    "COMPILER_ID",
    "CONTRACT_SCHEMA_PATH",
    "CompileResult",
    "Contract",
    "EvalCase",
    "compile_contract",
    "parse_contract",
    "read_contract",
]


@dataclass(frozen=True)
class CompileResult:
    interaction: CompiledInteraction | None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.interaction is not None


def compile_contract(
    contract: Contract | str | Path,
    render_request: RenderRequest,
    target_capabilities: Iterable[str],
) -> CompileResult:
    """Compile a contract (a model, or a path to its YAML) for one render request."""
    file = None
    if not isinstance(contract, Contract):
        file = str(contract)
        parsed, problems = read_contract(contract)
        if parsed is None:
            return CompileResult(None, problems)
        contract = parsed
    result = compile_plain(
        contract.model_dump(by_alias=True),
        render_request.inputs,
        render_request.context,
        target_capabilities,
        file=file,
    )
    if result.interaction is None:
        diagnostics = []
        for item in result.diagnostics:
            located = Diagnostic(
                code=item["code"],
                severity=item["severity"],
                message=item["message"],
                json_pointer=item["json_pointer"],
            )
            if "file" in item:  # the path marks the diagnostic; it is not validated
                located = located.model_copy(update={"file": item["file"]})
            diagnostics.append(located)
        return CompileResult(None, diagnostics)
    interaction = result.interaction
    return CompileResult(
        CompiledInteraction(
            compiler=interaction["compiler"],
            contract_id=interaction["contract_id"],
            contract_version=interaction["contract_version"],
            messages=[CompiledMessage(**message) for message in interaction["messages"]],
            output_schema=interaction["output_schema"],
            required_capabilities=interaction["required_capabilities"],
            target_capabilities=interaction["target_capabilities"],
            runtime_policy=interaction["runtime_policy"],
            extensions=interaction["extensions"],
        ),
        [],
    )
