"""The ``templiqx/v1alpha1`` contract compiler.

``compile_contract`` never raises for a bad contract or bad values: it returns the
diagnostics, each with a stable code and a JSON pointer into the contract or request.

The ``Contract`` model is the one check of a contract document; the compiler proper
(``core.compile_plain``) works on the validated model dumped as plain data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from .._contracts import CompiledInteraction, Diagnostic, RenderRequest
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
    target_capabilities: Iterable[str] | None = None,
) -> CompileResult:
    """Compile a contract (a model, or a path to its YAML) for one render request.

    ``target_capabilities`` defaults to what the contract declares, never a runtime's: the
    interaction and its request fingerprint do not depend on which runtime runs it."""
    file = None
    if not isinstance(contract, Contract):
        file = str(contract)
        parsed, problems = read_contract(contract)
        if parsed is None:
            return CompileResult(None, problems)
        contract = parsed
    interaction, diagnostics = compile_plain(
        contract.model_dump(by_alias=True),
        render_request.inputs,
        render_request.context,
        contract.declared_capabilities if target_capabilities is None else target_capabilities,
    )
    if interaction is None:
        located = contract.locate(diagnostics)
        return CompileResult(None, [Diagnostic(**item, file=file) for item in located])
    return CompileResult(CompiledInteraction(**interaction))
