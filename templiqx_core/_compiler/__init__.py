"""The ``templiqx/v1alpha1`` contract compiler (SPEC §8.1).

``compile_contract`` never raises for a bad contract or bad values: it returns the
diagnostics, each with a stable code and a JSON pointer into the contract or request.

One compiler (``core.compile_plain``) works on validated plain data; this public face
wraps its results in the wire models. A contract file is accepted without pydantic when
``check`` can vouch for it, and validated by the ``Contract`` model otherwise (which
yields the located diagnostics). Importing this package loads no pydantic: the models
load on first use (PEP 562), so the CLI's ``compile`` can do without them.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .core import COMPILER_ID, compile_plain

if TYPE_CHECKING:
    from .._contracts import CompiledInteraction, Diagnostic, RenderRequest
    from .model import Contract, EvalCase
    from .parse import parse_contract, read_contract

__all__ = [
    "COMPILER_ID",
    "CompileResult",
    "Contract",
    "EvalCase",
    "compile_contract",
    "parse_contract",
    "read_contract",
]

_LAZY = {
    "Contract": ".model",
    "EvalCase": ".model",
    "parse_contract": ".parse",
    "read_contract": ".parse",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


@dataclass(frozen=True)
class CompileResult:
    interaction: CompiledInteraction | None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.interaction is not None


def _plain_contract(contract: Contract | str | Path) -> tuple[Any, list[Diagnostic]]:
    """The validated document as plain data, or ``None`` and the model's diagnostics."""
    from .check import read_checked_contract
    from .model import Contract
    from .parse import read_contract

    if isinstance(contract, Contract):
        return contract.model_dump(by_alias=True), []
    plain = read_checked_contract(contract)
    if plain is not None:
        return plain, []
    parsed, diagnostics = read_contract(contract)
    if parsed is None:
        return None, diagnostics
    return parsed.model_dump(by_alias=True), []


def compile_contract(
    contract: Contract | str | Path,
    render_request: RenderRequest,
    target_capabilities: Iterable[str],
) -> CompileResult:
    """Compile a contract (a model, or a path to its YAML) for one render request."""
    from .._contracts import CompiledInteraction, CompiledMessage, Diagnostic
    from .model import Contract

    plain, problems = _plain_contract(contract)
    if plain is None:
        return CompileResult(None, problems)
    file = None if isinstance(contract, Contract) else str(contract)
    result = compile_plain(
        plain, render_request.inputs, render_request.context, target_capabilities, file=file
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
            if "file" in item:  # as before: the path marks, it is not validated
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
