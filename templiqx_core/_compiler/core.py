"""The compiler proper, on plain data: one contract document, one request, one result.

Its input is the validated ``Contract`` model dumped by alias: nodes as dicts, values as
JSON, which is what the renderer walks and the reference's semantics are written for;
absent optional fields read as the model's defaults. Its output is plain data too: the
interaction as ``CompiledInteraction`` lays it out, and diagnostics in ``Diagnostic``'s
field order. ``compile_contract`` wraps both in the wire models.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from .. import codes
from .._canonical import NotJson, canonical_json
from .._errors import InvalidData
from .._schema import compile_schema
from .._schema_errors import more_failures, schema_failures
from .._version import REFERENCE_VERSION
from .render import MISSING, Binding, Renderer, diagnostic

__all__ = [
    "COMPILER_ID",
    "PlainResult",
    "check_plain",
    "compile_plain",
    "declared_capabilities",
    "value_schema_diagnostics",
]

# Names the compilation semantics (the reference compiler's), not this distribution's
# version: an interaction compiled here is byte-identical to the reference's, id included.
COMPILER_ID = f"templiqx-core/{REFERENCE_VERSION}"


class PlainResult(NamedTuple):
    """The interaction (``None`` when any diagnostic is an error) and the diagnostics."""

    interaction: dict[str, Any] | None
    diagnostics: list[dict[str, Any]]


def declared_capabilities(contract: Mapping[str, Any]) -> list[str]:
    """What the contract needs: its capabilities and its extensions' (default targets)."""
    extensions = contract.get("extensions", {})
    return [*contract.get("capabilities", []), *(e["capability"] for e in extensions.values())]


def _not_json(value: Any, what: str, pointer: str) -> dict[str, Any]:
    """The diagnostic for a value that is no JSON, at the offending part's pointer."""
    try:
        canonical_json(value)
    except NotJson as error:
        message = f"{what} holds {error.reason} at {error.pointer or '/'} (not JSON)"
        return diagnostic(codes.DATA_INVALID, message, pointer + error.pointer)
    raise AssertionError(f"{pointer}: a JSON value the schema validator refused")


def value_schema_diagnostics(
    validator: Any, schema: Any, value: Any, section: str, name: str
) -> list[dict[str, Any]]:
    """One ``TQX_VALUE_SCHEMA`` per failed rule of an input or context value: the message
    names the failing value relative to the section (``/subject: shorter than minLength
    1``), the pointer locates it in the request (``/inputs/subject``)."""
    failures, more = schema_failures(validator, schema, value)
    prefix = f"/{name}"  # as the section's other pointers
    found = [
        diagnostic(
            codes.VALUE_SCHEMA,
            failure.message(prefix),
            f"/{section}{prefix}{failure.pointer}",
        )
        for failure in failures
    ]
    if more:
        message = f"{prefix}: {more_failures(more)}"
        found.append(diagnostic(codes.VALUE_SCHEMA, message, f"/{section}{prefix}"))
    if not found:  # the validator said no without naming a rule
        message = f"{section}.{name} does not match its declared schema"
        found.append(diagnostic(codes.VALUE_SCHEMA, message, f"/{section}{prefix}"))
    return found


def _bind_values(
    section: str, specs: Mapping[str, Any], values: Mapping[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Check one section's values as the reference's ``validate_values``: declared fields
    in name order (missing required ones, then schema), then undeclared values in name
    order (the host's ``_templiqx_*`` context keys excepted)."""
    diagnostics = []
    schemas = {name: spec["schema"] for name, spec in specs.items()}
    for name in sorted(specs):
        spec = specs[name]
        pointer = f"/{section}/{name}"
        try:
            validator = compile_schema(spec["schema"], what=f"{section}.{name} schema")
        except InvalidData as error:
            diagnostics.append(diagnostic(codes.VALUE_SCHEMA, str(error), pointer))
            schemas[name] = {}  # reported; rendering on only finds further errors
            continue
        if name not in values:
            if spec.get("required", False):
                message = f"required {section} value '{name}' is missing"
                diagnostics.append(diagnostic(codes.VALUE_REQUIRED, message, pointer))
        else:
            try:
                valid = validator.is_valid(values[name])
            except ValueError:  # not JSON (a lone surrogate): jsonschema-rs cannot take it
                diagnostics.append(_not_json(values[name], f"{section}.{name}", pointer))
                continue
            if not valid:
                diagnostics += value_schema_diagnostics(
                    validator, spec["schema"], values[name], section, name
                )
    for name in sorted(values):
        if section == "context" and name.startswith("_templiqx_"):
            continue
        if name not in specs:
            message = f"undeclared {section} value '{name}'"
            diagnostics.append(diagnostic(codes.VALUE_UNKNOWN, message, f"/{section}/{name}"))
    schema = {
        "type": "object",
        "properties": schemas,
        "additionalProperties": False,
    }
    return {"schema": schema, "value": dict(values)}, diagnostics


def _gate_capabilities(
    contract: Mapping[str, Any], targets: set[str]
) -> tuple[list[str], dict[str, Any], list[dict[str, Any]]]:
    diagnostics = []
    capabilities = contract.get("capabilities", [])
    required = set(capabilities)
    for capability in capabilities:
        if capability not in targets:
            message = f"target lacks required capability '{capability}'"
            diagnostics.append(diagnostic(codes.CAPABILITY_UNSUPPORTED, message, "/capabilities"))
    extensions: dict[str, Any] = {}
    for key, spec in sorted(contract.get("extensions", {}).items()):
        pointer = f"/extensions/{key}"
        namespace, dot, name = key.partition(".")
        if not dot or not namespace or not name:
            diagnostics.append(
                diagnostic(
                    codes.EXTENSION_NAMESPACE,
                    f"extension {key!r} must be namespaced as <namespace>.<name>",
                    pointer,
                )
            )
            continue
        capability = spec["capability"]
        if capability not in targets:
            diagnostics.append(
                diagnostic(
                    codes.EXTENSION_UNSUPPORTED,
                    f"target lacks capability '{capability}' required by extension '{key}'",
                    pointer,
                )
            )
            continue
        try:
            validator = compile_schema(spec["schema"], what=f"extension {key} schema")
        except InvalidData as error:
            diagnostics.append(diagnostic(codes.EXTENSION_SCHEMA, str(error), f"{pointer}/schema"))
            continue
        if not validator.is_valid(spec["value"]):
            failures, _ = schema_failures(validator, spec["schema"], spec["value"])
            rules = "; ".join(failure.message() for failure in failures) or "see its schema"
            diagnostics.append(
                diagnostic(
                    codes.EXTENSION_SCHEMA,
                    f"extension {key!r} value does not match its schema: {rules}",
                    f"{pointer}/value",
                )
            )
            continue
        required.add(capability)
        extensions[key] = spec["value"]
    return sorted(required), extensions, diagnostics


def compile_plain(
    contract: Mapping[str, Any],
    inputs: Mapping[str, Any],
    context: Mapping[str, Any],
    target_capabilities: Iterable[str],
    *,
    file: str | None = None,
    static: bool = False,
) -> PlainResult:
    """Compile a validated contract for one request's values; ``file`` marks diagnostics.

    ``static``: no request at all (``check``): missing required values are not errors and
    the messages are checked against the declared schemas only, rendering nothing.
    """
    targets = set(target_capabilities)
    diagnostics = []
    output_schema = contract["output_schema"]
    try:
        compile_schema(output_schema)
    except InvalidData as error:
        diagnostics.append(diagnostic(codes.VALUE_SCHEMA, str(error), "/output_schema"))
    bound_inputs, found = _bind_values("inputs", contract.get("inputs", {}), inputs)
    diagnostics += found
    bound_context, found = _bind_values("context", contract.get("context", {}), context)
    diagnostics += found
    required, extensions, found = _gate_capabilities(contract, targets)
    diagnostics += found
    if static:
        diagnostics = [d for d in diagnostics if d["code"] != codes.VALUE_REQUIRED]

    values_ok = not diagnostics and not static
    scope = {
        "inputs": Binding(bound_inputs["schema"], bound_inputs["value"] if values_ok else MISSING),
        "context": Binding(
            bound_context["schema"], bound_context["value"] if values_ok else MISSING
        ),
    }
    renderer = Renderer(contract.get("components", {}))
    messages = [
        {
            "role": message["role"],
            "content": renderer.render(
                message["content"], scope, f"/messages/{index}/content", active=values_ok
            ),
        }
        for index, message in enumerate(contract["messages"])
    ]
    diagnostics += renderer.diagnostics
    if file is not None:
        for item in diagnostics:
            item["file"] = item.get("file") or file
    if diagnostics or static:
        return PlainResult(None, diagnostics)
    interaction = {
        "compiler": COMPILER_ID,
        "contract_id": contract["id"],
        "contract_version": contract["version"],
        "messages": messages,
        "output_schema": output_schema,
        "required_capabilities": required,
        "target_capabilities": sorted(targets),
        "runtime_policy": contract.get("runtime_policy", {}),
        "extensions": extensions,
    }
    return PlainResult(interaction, [])


def _in_eval(item: dict[str, Any], index: int, eval_id: str) -> dict[str, Any]:
    """A request-relative diagnostic located in the eval fixture that produced it."""
    pointer = item.get("json_pointer") or ""
    if pointer.startswith(("/inputs", "/context")):
        item["json_pointer"] = f"/evals/{index}{pointer}"
    item["message"] = f"eval {eval_id!r}: {item['message']}"
    return item


def check_plain(contract: Mapping[str, Any], *, file: str | None = None) -> list[dict[str, Any]]:
    """Everything wrong with a validated contract that needs no request: its schemas,
    references, conditions, ``for_each`` collections, components and extensions (against
    its declared capabilities); then each eval fixture, which also reaches what only
    values reveal (filters): its inputs and context compiled, its ``fake_output`` against
    ``output_schema``. Diagnostics point into the contract (``/evals/0/inputs/subject``)."""
    targets = declared_capabilities(contract)
    static = compile_plain(contract, {}, {}, targets, static=True).diagnostics
    diagnostics = list(static)
    seen = {canonical_json(d) for d in static}
    output_schema = contract["output_schema"]
    for index, case in enumerate(contract.get("evals", [])):
        result = compile_plain(contract, case.get("inputs", {}), case.get("context", {}), targets)
        for item in result.diagnostics:
            if canonical_json(item) not in seen:  # the contract's own, already reported
                diagnostics.append(_in_eval(item, index, case["id"]))
        try:
            validator = compile_schema(output_schema)
            valid = validator.is_valid(case["fake_output"])
        except (InvalidData, ValueError):
            continue  # an invalid output_schema is reported above; not JSON by the loader
        if valid:
            continue
        failures, more = schema_failures(validator, output_schema, case["fake_output"])
        pointer = f"/evals/{index}/fake_output"
        for failure in failures:
            item = diagnostic(codes.OUTPUT_SCHEMA, failure.message(), pointer + failure.pointer)
            diagnostics.append(_in_eval(item, index, case["id"]))
        if more:
            item = diagnostic(codes.OUTPUT_SCHEMA, f"/: {more_failures(more)}", pointer)
            diagnostics.append(_in_eval(item, index, case["id"]))
    if file is not None:
        for item in diagnostics:
            item["file"] = item.get("file") or file
    return diagnostics
