"""The ``templiqx/v1alpha1`` contract compiler (SPEC §8.1).

``compile_contract`` never raises for a bad contract or bad values: it returns the
diagnostics, each with a stable code and a JSON pointer into the contract or request.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import codes
from .._contracts import CompiledInteraction, CompiledMessage, Diagnostic, RenderRequest
from .._errors import InvalidData
from .._schema import compile_schema
from .._version import REFERENCE_VERSION
from .model import Contract, EvalCase, FieldSpec
from .parse import parse_contract, read_contract
from .render import MISSING, Binding, Renderer

__all__ = [
    "COMPILER_ID",
    "CompileResult",
    "Contract",
    "EvalCase",
    "compile_contract",
    "parse_contract",
    "read_contract",
]

# Names the compilation semantics (the reference compiler's), not this distribution's
# version: an interaction compiled here is byte-identical to the reference's, id included.
COMPILER_ID = f"templiqx-core/{REFERENCE_VERSION}"


@dataclass(frozen=True)
class CompileResult:
    interaction: CompiledInteraction | None
    diagnostics: list[Diagnostic] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.interaction is not None


def _error(code: str, message: str, pointer: str) -> Diagnostic:
    return Diagnostic(code=code, severity="error", message=message, json_pointer=pointer)


def _bind_values(
    section: str, specs: Mapping[str, FieldSpec], values: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Diagnostic]]:
    """Check one section's values as the reference's ``validate_values``: declared fields
    in name order (missing required ones, then schema), then undeclared values in name
    order (the host's ``_templiqx_*`` context keys excepted)."""
    diagnostics = []
    for name in sorted(specs):
        spec = specs[name]
        pointer = f"/{section}/{name}"
        try:
            validator = compile_schema(spec.schema_, what=f"{section}.{name} schema")
        except InvalidData as error:
            diagnostics.append(_error(codes.VALUE_SCHEMA, str(error), pointer))
            continue
        if name not in values:
            if spec.required:
                message = f"required {section} value '{name}' is missing"
                diagnostics.append(_error(codes.VALUE_REQUIRED, message, pointer))
        elif not validator.is_valid(values[name]):
            diagnostics.append(
                _error(
                    codes.VALUE_SCHEMA,
                    f"{section}.{name} does not match its declared schema",
                    pointer,
                )
            )
    for name in sorted(values):
        if section == "context" and name.startswith("_templiqx_"):
            continue
        if name not in specs:
            message = f"undeclared {section} value '{name}'"
            diagnostics.append(_error(codes.VALUE_UNKNOWN, message, f"/{section}/{name}"))
    schema = {
        "type": "object",
        "properties": {name: spec.schema_ for name, spec in specs.items()},
        "additionalProperties": False,
    }
    return {"schema": schema, "value": dict(values)}, diagnostics


def _gate_capabilities(
    contract: Contract, targets: set[str]
) -> tuple[list[str], dict[str, Any], list[Diagnostic]]:
    diagnostics = []
    required = set(contract.capabilities)
    for capability in contract.capabilities:
        if capability not in targets:
            message = f"target lacks required capability '{capability}'"
            diagnostics.append(_error(codes.CAPABILITY_UNSUPPORTED, message, "/capabilities"))
    extensions: dict[str, Any] = {}
    for key, spec in sorted(contract.extensions.items()):
        pointer = f"/extensions/{key}"
        namespace, dot, name = key.partition(".")
        if not dot or not namespace or not name:
            diagnostics.append(
                _error(
                    codes.EXTENSION_NAMESPACE,
                    f"extension {key!r} must be namespaced as <namespace>.<name>",
                    pointer,
                )
            )
            continue
        if spec.capability not in targets:
            diagnostics.append(
                _error(
                    codes.EXTENSION_UNSUPPORTED,
                    f"target lacks capability '{spec.capability}' required by extension '{key}'",
                    pointer,
                )
            )
            continue
        try:
            valid = compile_schema(spec.schema_, what=f"extension {key} schema").is_valid(
                spec.value
            )
        except InvalidData as error:
            diagnostics.append(_error(codes.EXTENSION_SCHEMA, str(error), f"{pointer}/schema"))
            continue
        if not valid:
            diagnostics.append(
                _error(
                    codes.EXTENSION_SCHEMA,
                    f"extension {key!r} value does not match its schema",
                    f"{pointer}/value",
                )
            )
            continue
        required.add(spec.capability)
        extensions[key] = spec.value
    return sorted(required), extensions, diagnostics


def compile_contract(
    contract: Contract | str | Path,
    render_request: RenderRequest,
    target_capabilities: Iterable[str],
) -> CompileResult:
    """Compile a contract (a model, or a path to its YAML) for one render request."""
    file = None
    if not isinstance(contract, Contract):
        file = str(contract)
        parsed, diagnostics = read_contract(contract)
        if parsed is None:
            return CompileResult(None, diagnostics)
        contract = parsed
    targets = set(target_capabilities)
    diagnostics = []
    try:
        compile_schema(contract.output_schema)
    except InvalidData as error:
        diagnostics.append(_error(codes.VALUE_SCHEMA, str(error), "/output_schema"))
    inputs, found = _bind_values("inputs", contract.inputs, render_request.inputs)
    diagnostics += found
    context, found = _bind_values("context", contract.context, render_request.context)
    diagnostics += found
    required, extensions, found = _gate_capabilities(contract, targets)
    diagnostics += found

    values_ok = not diagnostics
    scope = {
        "inputs": Binding(inputs["schema"], inputs["value"] if values_ok else MISSING),
        "context": Binding(context["schema"], context["value"] if values_ok else MISSING),
    }
    renderer = Renderer(contract.components)
    messages = [
        CompiledMessage(
            role=message.role,
            content=renderer.render(
                message.content, scope, f"/messages/{index}/content", active=values_ok
            ),
        )
        for index, message in enumerate(contract.messages)
    ]
    diagnostics += renderer.diagnostics
    if file is not None:
        diagnostics = [d.model_copy(update={"file": d.file or file}) for d in diagnostics]
    if diagnostics:
        return CompileResult(None, diagnostics)
    interaction = CompiledInteraction(
        compiler=COMPILER_ID,
        contract_id=contract.id,
        contract_version=contract.version,
        messages=messages,
        output_schema=contract.output_schema,
        required_capabilities=required,
        target_capabilities=sorted(targets),
        runtime_policy=contract.runtime_policy,
        extensions=extensions,
    )
    return CompileResult(interaction, [])
