"""The ``templiqx/v1alpha1`` compiler, on the validated contract as plain data (as the reference):
it never raises for a bad contract or bad values but returns diagnostics (a stable code, a JSON
pointer); references resolve against the declared schemas, so a typo in an untaken branch is one."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable, Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from .. import codes
from .._canonical import canonical_json
from .._contracts import CompiledInteraction, Diagnostic, RenderRequest
from .._errors import InvalidData
from .._schema import compile_schema, schema_messages
from .._version import REFERENCE_VERSION
from .model import CONTRACT_SCHEMA_PATH as CONTRACT_SCHEMA_PATH
from .model import Contract as Contract
from .model import EvalCase as EvalCase
from .model import parse_contract as parse_contract
from .model import read_contract as read_contract

_OPTIONAL_HINT = " (an optional value: read it through the default filter, or test it with exists)"
MISSING: Any = object()  # not known: ``check`` renders without values
_ABSENT: Any = object()  # known not to be there: an optional value left out
ANY_SCHEMA: dict[str, Any] = {}
_BOOLEAN: dict[str, Any] = {"type": "boolean"}


class Binding(NamedTuple):  # a name in scope: its schema (``{}`` when undeclared), its value
    schema: Any
    value: Any


Node = dict[str, Any]  # a content node or an expression: a validated JSON object
Scope = Mapping[str, Binding]


def diagnostic(code: str, message: str, pointer: str) -> dict[str, Any]:
    return {"code": code, "severity": "error", "message": message, "json_pointer": pointer}


class _Abort(Exception):  # a node could not be rendered; its diagnostic is recorded
    pass


_JSON_TYPES = ((type(None), "null"), (bool, "boolean"), ((int, float), "number"), (str, "string"))


def _json_type(value: Any) -> str:
    found = (name for kind, name in _JSON_TYPES if isinstance(value, kind))
    return next(found, "array" if isinstance(value, list) else "object")


_Text = Callable[[str], str]
_STRING_FILTERS: dict[str, _Text] = {"trim": str.strip, "lower": str.lower, "upper": str.upper}
_NEEDS = {"format_date": "an ISO date string (YYYY-MM-DD)", "format_number": "a number"}


def _schema_types(schema: Any) -> set[str] | None:
    declared = schema.get("type") if isinstance(schema, dict) else None
    if declared is None:
        return None
    types = {declared} if isinstance(declared, str) else set(declared)
    return {"number" if t == "integer" else t for t in types}


def _child_schema(schema: Any, segment: str) -> Any:
    """The schema of ``segment`` inside ``schema``; None when the path cannot exist."""
    if not isinstance(schema, dict) or not schema:
        return ANY_SCHEMA  # undeclared: anything goes, checked dynamically
    types = _schema_types(schema)
    if types is None or "object" in types:
        props = schema.get("properties", {})
        if segment in props:
            return props[segment]
        extra = schema.get("additionalProperties", True)
        if extra is False:
            return None if types is not None or props else ANY_SCHEMA
        return extra if isinstance(extra, dict) else ANY_SCHEMA
    if "array" in types and segment.isdigit():
        items = schema.get("items", ANY_SCHEMA)
        return items if isinstance(items, dict) else ANY_SCHEMA
    return None


def _child_value(value: Any, segment: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(segment, MISSING)
    if isinstance(value, list) and segment.isdigit() and int(segment) < len(value):
        return value[int(segment)]
    return MISSING


@dataclass
class Renderer:
    components: Mapping[str, Any]  # name -> typed component (a dict) or a list of nodes
    diagnostics: list[dict[str, Any]] = field(default_factory=list)
    _depth: int = 0
    _active: bool = True  # rendering a branch that is taken: a value left out is an error
    _reached: set[str] = field(default_factory=set)  # components some use rendered

    def fail(self, code: str, message: str, pointer: str) -> _Abort:
        found = diagnostic(code, message, pointer)
        if found not in self.diagnostics:  # met again (a loop's next item): said once
            self.diagnostics.append(found)
        return _Abort()

    def resolve(self, expr: Node, scope: Scope, pointer: str, *, absent: Any = None) -> Binding:
        """The path's schema and value; no value is ``absent``, if None an error (if active)."""
        path: str = expr["path"]
        head, *rest = path.split(".")
        if head not in scope:
            known = ", ".join(sorted(scope)) or "nothing"
            message = f"unknown reference {path!r} (in scope: {known})"
            raise self.fail(codes.REF_UNKNOWN, message, pointer)
        schema, value = scope[head].schema, scope[head].value
        gone = value is _ABSENT  # a parameter left out, or passed on absent
        for segment in rest:
            schema = _child_schema(schema, segment)
            if schema is None:
                message = f"reference {path!r}: {segment!r} is not declared by its schema"
                raise self.fail(codes.REF_UNKNOWN, message, pointer)
            if value is not MISSING and not gone:
                value = _child_value(value, segment)
                gone = value is MISSING
        if gone and absent is None and self._active:
            message = f"reference {path!r} has no value{_OPTIONAL_HINT}"
            raise self.fail(codes.REF_UNKNOWN, message, pointer)
        if gone:
            value = MISSING if absent is None else absent
        return Binding(schema, value)

    def evaluate(self, expr: Node, scope: Scope, pointer: str, *, absent: Any = None) -> Binding:
        kind = expr["kind"]
        if kind == "ref":
            return self.resolve(expr, scope, pointer, absent=absent)
        if kind == "literal":
            return Binding(ANY_SCHEMA, expr["value"])
        if kind == "exists":
            found = self.resolve(expr, scope, pointer, absent=_ABSENT).value
            return Binding(_BOOLEAN, found if found is MISSING else found not in (_ABSENT, None))
        if kind == "equals":
            left = self.evaluate(expr["left"], scope, f"{pointer}/left").value
            right = self.evaluate(expr["right"], scope, f"{pointer}/right").value
            return Binding(_BOOLEAN, MISSING if MISSING in (left, right) else left == right)
        if kind == "not":
            operand = self.condition(expr["value"], scope, f"{pointer}/value")
            return Binding(_BOOLEAN, MISSING if operand is MISSING else not operand)
        assert kind in ("and", "or")
        where = f"{pointer}/values"
        values = [self.condition(v, scope, f"{where}/{i}") for i, v in enumerate(expr["values"])]
        combined = all(values) if kind == "and" else any(values)
        return Binding(_BOOLEAN, MISSING if MISSING in values else combined)

    def condition(self, expr: Node, scope: Scope, pointer: str) -> Any:
        binding = self.evaluate(expr, scope, pointer)
        types = _schema_types(binding.schema) or {"boolean"}  # declared, and the value's
        if binding.value is not MISSING:
            types.add(_json_type(binding.value))
        if types != {"boolean"}:
            message = f"a condition must be boolean, not {'/'.join(sorted(types - {'boolean'}))}"
            raise self.fail(codes.CONDITION_TYPE, message, pointer)
        return binding.value

    def apply_filter(self, flt: str | Node, value: Any, pointer: str) -> Any:
        call: Node = flt if isinstance(flt, dict) else {"name": flt}
        name, decimals = call["name"], call.get("decimals")
        if name == "default":
            return call.get("value", "") if value is _ABSENT or value is None else value
        if name == "json":
            return canonical_json(value).decode("utf-8")
        try:
            if name == "format_date":
                return dt.date.fromisoformat(value).strftime(call.get("format") or "%Y-%m-%d")
            if name != "format_number":
                return _STRING_FILTERS[name](value)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise TypeError("not a number")
            return str(value) if decimals is None else f"{value:.{decimals}f}"
        except OverflowError:  # an integer no float holds: its digits, then the zeros
            return f"{value}.{'0' * decimals}" if decimals else str(value)
        except (TypeError, ValueError):
            needs = _NEEDS.get(name, "a string")
            message = f"filter {name} needs {needs}, got {_json_type(value)}"
            raise self.fail(codes.FILTER_TYPE, message, pointer) from None

    def render(self, nodes: list[Node], scope: Scope, pointer: str, *, active: bool = True) -> str:
        outer, self._active = self._active, active
        parts: list[str] = []
        for index, node in enumerate(nodes):
            with suppress(_Abort):
                parts.append(self.node(node, scope, f"{pointer}/{index}"))
        self._active = outer
        return "".join(parts)

    def node(self, node: Node, scope: Scope, pointer: str) -> str:
        kind = node["kind"]
        if kind == "text":
            return str(node["value"])
        if kind == "interpolate":
            return self.interpolate(node, scope, pointer)
        if kind == "when":
            value = self.condition(node["condition"], scope, f"{pointer}/condition")
            taken = self._active and value is True
            skipped = self._active and value is False
            then = self.render(node["then"], scope, f"{pointer}/then", active=taken)
            otherwise = self.render(node.get("else", []), scope, f"{pointer}/else", active=skipped)
            return then if taken else otherwise if skipped else ""
        render = self.for_each if kind == "for_each" else self.component
        return render(node, scope, pointer)

    def interpolate(self, node: Node, scope: Scope, pointer: str) -> str:
        filters = node.get("filters", [])
        names = [f if isinstance(f, str) else f["name"] for f in filters]
        where = f"{pointer}/expression"
        if "default" in names and names[0] != "default":  # found without values, as check runs
            message = f"filter {names[0]} would meet an absent value first (put default first)"
            raise self.fail(codes.REF_UNKNOWN, message, f"{pointer}/filters/0")
        absent = _ABSENT if "default" in names else None  # absent is the filter's to fill
        binding = self.evaluate(node["expression"], scope, where, absent=absent)
        types = _schema_types(binding.schema)
        if "json" not in names and types is not None and types <= {"object", "array"}:
            message = "cannot interpolate an object or array without the json filter"
            raise self.fail(codes.INTERPOLATION_TYPE, message, where)
        value = binding.value
        filling = self._active and (value is _ABSENT or value is None)  # this request's stand-in
        if absent is not None and not filling:  # its way through the filters: known now
            self.filtered(filters, _ABSENT, pointer)
        if not self._active or value is MISSING:
            return ""
        return self.filtered(filters, value, pointer)

    def filtered(self, filters: list[Any], value: Any, pointer: str) -> str:
        for index, flt in enumerate(filters):
            value = self.apply_filter(flt, value, f"{pointer}/filters/{index}")
        if isinstance(value, (dict, list)) or value is None:
            message = f"cannot interpolate {_json_type(value)} without the json filter"
            message += _OPTIONAL_HINT if value is None else ""
            raise self.fail(codes.INTERPOLATION_TYPE, message, f"{pointer}/expression")
        if isinstance(value, bool):
            return "true" if value else "false"
        return str(value)

    def for_each(self, node: Node, scope: Scope, pointer: str) -> str:
        binding = self.evaluate(node["collection"], scope, f"{pointer}/collection")
        schema, items = binding.schema, binding.value
        array = "array" in (_schema_types(schema) or {"array"})
        if not array or (items is not MISSING and not isinstance(items, list)):
            raise self.fail(codes.FOR_EACH_TYPE, "for_each needs an array", f"{pointer}/collection")
        item_schema = schema.get("items", ANY_SCHEMA) if isinstance(schema, dict) else ANY_SCHEMA
        body, nodes, name = f"{pointer}/body", node["body"], node["item"]
        if not self._active or items is MISSING or not items:
            self.render(nodes, {**scope, name: Binding(item_schema, MISSING)}, body, active=False)
            return ""
        separator: str = node.get("separator", "")
        return separator.join(
            self.render(nodes, {**scope, name: Binding(item_schema, item)}, body) for item in items
        )

    def component(self, node: Node, scope: Scope, pointer: str) -> str:
        name: str = node["name"]
        definition = self.components.get(name)
        if definition is None:
            message = f"component {name!r} is not defined"
            raise self.fail(codes.COMPONENT_MISSING, message, f"{pointer}/name")
        if self._depth > 16:
            message = "components nest deeper than 16 levels"
            raise self.fail(codes.COMPONENT_MISSING, message, pointer)
        args = {  # an absent value is passed on absent, as null is null
            arg: self.evaluate(expr, scope, f"{pointer}/with/{arg}", absent=_ABSENT)
            for arg, expr in node.get("with", {}).items()
        }
        self._reached.add(name)
        where = f"/components/{name}"
        if isinstance(definition, dict):  # typed: declared parameters
            inner = self.typed_arguments(name, definition.get("parameters", {}), args, pointer)
            content, where = definition["content"], f"{where}/content"
        else:  # legacy: a bare list of nodes
            inner, content = args, definition
        self._depth += 1
        text = self.render(content, inner, where, active=self._active)
        self._depth -= 1
        return text

    def unused(self) -> None:
        """Typed components no use reached, rendered inactive: the reference checks them all."""
        for name, definition in self.components.items():
            if name in self._reached or not isinstance(definition, dict):
                continue  # a legacy one's scope is whatever a use passes: unknown here
            parameters = definition.get("parameters", {})
            unknown = {parameter: Binding(ANY_SCHEMA, MISSING) for parameter in parameters}
            scope = self.typed_arguments(name, parameters, unknown, f"/components/{name}")
            self.render(definition["content"], scope, f"/components/{name}/content", active=False)

    def typed_arguments(
        self, component: str, parameters: Mapping[str, Node], args: Scope, pointer: str
    ) -> dict[str, Binding]:
        for name in args:
            if name not in parameters:
                message = f"argument {name!r} is not a parameter of the component"
                self.fail(codes.COMPONENT_ARGUMENT_UNKNOWN, message, f"{pointer}/with/{name}")
        bound: dict[str, Binding] = {}
        for name, spec in parameters.items():
            schema, validator = spec["schema"], None
            try:
                validator = compile_schema(schema, what=f"parameter {name} schema")
            except InvalidData as error:  # reported once, as every diagnostic
                where = f"/components/{component}/parameters/{name}/schema"
                self.fail(codes.VALUE_SCHEMA, str(error), where)
                schema = ANY_SCHEMA  # rendering on only finds further errors
            value = args[name].value if name in args else _ABSENT  # not given: absent
            known = value is not MISSING and value is not _ABSENT
            if name not in args and spec.get("required", False):
                message = f"required argument {name!r} is missing"
                self.fail(codes.COMPONENT_ARGUMENT_MISSING, message, f"{pointer}/with")
                value = MISSING  # reported: reading it is no second error
            elif value is _ABSENT and spec.get("required", False):  # passed on absent
                if self._active:
                    message = f"required argument {name!r} has no value"
                    raise self.fail(codes.REF_UNKNOWN, message, f"{pointer}/with/{name}")
                value = MISSING
            elif known and validator is not None and not validator.is_valid(value):
                rules = "; ".join(text for _, text in schema_messages(validator, schema, value))
                message = f"argument {name!r} does not match the parameter's schema: {rules}"
                self.fail(codes.COMPONENT_ARGUMENT_TYPE, message, f"{pointer}/with/{name}")
            bound[name] = Binding(schema, value)
        return bound


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
            if validator.is_valid(values[name]):
                continue
        except UnicodeEncodeError:  # jsonschema-rs cannot take a string with a lone surrogate
            message = f"{section}.{name} is not JSON: a string with a lone surrogate"
            diagnostics.append(diagnostic(codes.DATA_INVALID, message, pointer))
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


def compile_contract(
    contract: Contract | str | Path,
    render_request: RenderRequest,
    target_capabilities: Iterable[str] | None = None,
) -> CompileResult:
    """Compile a contract (a model, or a path to its YAML) for one render request; targets default
    to the contract's own capabilities, not a runtime's (the fingerprint does not depend on it)."""
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
        return CompileResult(None, [Diagnostic(**item, file=file) for item in diagnostics])
    return CompileResult(CompiledInteraction(**interaction))
