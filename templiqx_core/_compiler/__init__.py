"""The ``templiqx/v1alpha1`` contract compiler: ``compile_contract`` never raises for a bad
contract or bad values, it returns diagnostics with a stable code and a JSON pointer. Its
core works on the validated ``Contract`` dumped as plain data, as the reference does."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .. import codes
from .._canonical import NotJson, canonical_json
from .._contracts import CompiledInteraction, Diagnostic, RenderRequest
from .._errors import InvalidData
from .._schema import compile_schema, schema_messages
from .._version import REFERENCE_VERSION
from .model import CONTRACT_SCHEMA_PATH as CONTRACT_SCHEMA_PATH
from .model import Contract as Contract
from .model import EvalCase as EvalCase
from .model import parse_contract as parse_contract
from .model import read_contract as read_contract
from .render import MISSING, Binding, Renderer, diagnostic

# The reference compiler's semantics, not this distribution's version: byte-identical.
COMPILER_ID = f"templiqx-core/{REFERENCE_VERSION}"


def _bind_values(
    section: str, specs: Mapping[str, Any], values: Mapping[str, Any]
) -> tuple[Binding, list[dict[str, Any]]]:
    """The reference's ``validate_values``: declared fields by name, then undeclared ones."""
    diagnostics = []
    schemas = {name: spec["schema"] for name, spec in specs.items()}
    for name in sorted(specs):
        schema, pointer = specs[name]["schema"], f"/{section}/{name}"
        try:
            validator = compile_schema(schema, what=f"{section}.{name} schema")
        except InvalidData as error:
            diagnostics.append(diagnostic(codes.VALUE_SCHEMA, str(error), pointer))
            schemas[name] = {}  # reported; rendering on only finds further errors
            continue
        if name not in values:
            if specs[name].get("required", False):
                message = f"required {section} value '{name}' is missing"
                diagnostics.append(diagnostic(codes.VALUE_REQUIRED, message, pointer))
            continue
        try:
            valid = validator.is_valid(values[name])
        except ValueError:  # not JSON (a lone surrogate): jsonschema-rs cannot take it
            try:
                canonical_json(values[name])
            except NotJson as error:
                message = f"{section}.{name} holds {error.reason} at {error.pointer or '/'}"
                where = pointer + error.pointer
                diagnostics.append(diagnostic(codes.DATA_INVALID, f"{message} (not JSON)", where))
                continue
            raise
        if valid:
            continue
        # Per failed rule: ``/subject: fails minLength 1``, located in the request.
        found = schema_messages(validator, schema, values[name], f"/{name}")
        if not found:  # the validator said no without naming a rule
            found = [("", f"{section}.{name} does not match its declared schema")]
        for where, message in found:
            diagnostics.append(diagnostic(codes.VALUE_SCHEMA, message, pointer + where))
    for name in sorted(values):
        if name not in specs and not (section == "context" and name.startswith("_templiqx_")):
            message = f"undeclared {section} value '{name}'"
            diagnostics.append(diagnostic(codes.VALUE_UNKNOWN, message, f"/{section}/{name}"))
    schema = {"type": "object", "properties": schemas, "additionalProperties": False}
    return Binding(schema, dict(values)), diagnostics


def _extension_problem(
    key: str, spec: Mapping[str, Any], targets: set[str]
) -> dict[str, Any] | None:
    pointer = f"/extensions/{key}"
    if not all(key.partition(".")):  # a namespace, a dot and a name
        message = f"extension {key!r} must be namespaced as <namespace>.<name>"
        return diagnostic(codes.EXTENSION_NAMESPACE, message, pointer)
    if spec["capability"] not in targets:
        message = f"target lacks capability '{spec['capability']}' required by extension '{key}'"
        return diagnostic(codes.EXTENSION_UNSUPPORTED, message, pointer)
    try:
        validator = compile_schema(spec["schema"], what=f"extension {key} schema")
    except InvalidData as error:
        return diagnostic(codes.EXTENSION_SCHEMA, str(error), f"{pointer}/schema")
    if validator.is_valid(spec["value"]):
        return None
    found = schema_messages(validator, spec["schema"], spec["value"])
    rules = "; ".join(text for _, text in found) or "see its schema"
    message = f"extension {key!r} value does not match its schema: {rules}"
    return diagnostic(codes.EXTENSION_SCHEMA, message, f"{pointer}/value")


def compile_plain(
    contract: Mapping[str, Any],
    inputs: Mapping[str, Any],
    context: Mapping[str, Any],
    target_capabilities: Iterable[str],
    *,
    static: bool = False,
) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The interaction (``None`` on any error) and the diagnostics. ``static`` (``check``,
    no request): missing values are no error and nothing renders, schemas are checked."""
    targets = set(target_capabilities)
    diagnostics = []
    try:
        compile_schema(contract["output_schema"])
    except InvalidData as error:
        diagnostics.append(diagnostic(codes.VALUE_SCHEMA, str(error), "/output_schema"))
    scope: dict[str, Binding] = {}
    for section, values in (("inputs", inputs), ("context", context)):
        scope[section], found = _bind_values(section, contract.get(section, {}), values)
        diagnostics += found
    required = set(contract.get("capabilities", []))
    for capability in contract.get("capabilities", []):
        if capability not in targets:
            message = f"target lacks required capability '{capability}'"
            diagnostics.append(diagnostic(codes.CAPABILITY_UNSUPPORTED, message, "/capabilities"))
    extensions: dict[str, Any] = {}
    for key, spec in sorted(contract.get("extensions", {}).items()):
        problem = _extension_problem(key, spec, targets)
        if problem is not None:
            diagnostics.append(problem)
        else:
            required.add(spec["capability"])
            extensions[key] = spec["value"]
    if static:
        diagnostics = [d for d in diagnostics if d["code"] != codes.VALUE_REQUIRED]

    values_ok = not diagnostics and not static
    if not values_ok:  # render against the declared schemas only
        scope = {name: Binding(bound.schema, MISSING) for name, bound in scope.items()}
    renderer = Renderer(contract.get("components", {}))
    messages = []
    for index, message in enumerate(contract["messages"]):
        pointer = f"/messages/{index}/content"
        content = renderer.render(message["content"], scope, pointer, active=values_ok)
        messages.append({"role": message["role"], "content": content})
    renderer.unused()
    diagnostics += renderer.diagnostics
    if diagnostics or static:
        return None, diagnostics
    interaction = {
        "compiler": COMPILER_ID,
        "contract_id": contract["id"],
        "contract_version": contract["version"],
        "messages": messages,
        "output_schema": contract["output_schema"],
        "required_capabilities": sorted(required),
        "target_capabilities": sorted(targets),
        "runtime_policy": contract.get("runtime_policy", {}),
        "extensions": extensions,
    }
    return interaction, []


def check_plain(contract: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The contract's problems, then each eval fixture's, located in it (``/evals/0/...``)."""
    extensions = contract.get("extensions", {}).values()
    targets = [*contract.get("capabilities", []), *(spec["capability"] for spec in extensions)]
    _, diagnostics = compile_plain(contract, {}, {}, targets, static=True)
    seen = {canonical_json(d) for d in diagnostics}  # the contract's own, reported once
    output_schema = contract["output_schema"]
    for index, case in enumerate(contract.get("evals", [])):
        _, found = compile_plain(contract, case.get("inputs", {}), case.get("context", {}), targets)
        found = [item for item in found if canonical_json(item) not in seen]
        try:
            validator = compile_schema(output_schema)
            valid = validator.is_valid(case["fake_output"])
        except (InvalidData, ValueError):  # reported above; not JSON: refused by the loader
            valid = True
        if not valid:
            pointer = f"/evals/{index}/fake_output"
            for where, message in schema_messages(validator, output_schema, case["fake_output"]):
                found.append(diagnostic(codes.OUTPUT_SCHEMA, message, pointer + where))
        for item in found:  # located in the fixture that produced it
            pointer = item.get("json_pointer") or ""
            if pointer.startswith(("/inputs", "/context")):
                item["json_pointer"] = f"/evals/{index}{pointer}"
            item["message"] = f"eval {case['id']!r}: {item['message']}"
        diagnostics += found
    return diagnostics


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
    request fingerprint does not depend on which runtime runs it."""
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
