"""OpenAI's structured-outputs subset of JSON Schema, as one table (outside it, strict is a 400)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from . import codes
from ._canonical import json_pointer
from ._errors import InvalidData

if TYPE_CHECKING:
    from pydantic import BaseModel

# The subset: OpenAI's Structured Outputs guide, "Supported schemas" (platform.openai.com/docs/
# guides/structured-outputs#supported-schemas, cited 2026-12-06, cross-checked with
# openai-python's to_strict_json_schema of 2026-08-21). Other keywords are left out of what
# is sent (local validation still enforces them); the _REFUSED ones have no strict form.
_KEPT = "type properties required additionalProperties items anyOf enum const $ref $defs"
_KEPT += " definitions description title pattern format minimum maximum exclusiveMinimum"
_KEPT += " exclusiveMaximum multipleOf minItems maxItems"
_KEEP: Final = frozenset(_KEPT.split())
_REFUSED: Final = {
    "allOf": "allOf is not in the subset (one entry is merged, more cannot be)",
    "patternProperties": "objects with pattern-named keys are open objects",
    "prefixItems": "tuples (prefixItems) are not in the subset",
}
_FORMATS: Final = frozenset(
    {"date-time", "time", "date", "duration", "email", "hostname", "ipv4", "ipv6", "uuid"}
)
_TYPES: Final = frozenset({"string", "number", "boolean", "integer", "object", "array", "null"})
_ROOT = "the root must be an object schema (not anyOf, not another type)"
_OPEN = "an object must be closed (additionalProperties: false) with its properties declared"
_ANY = "a schema must declare type, enum, const, anyOf or $ref (this one accepts any value)"
MAX_DEPTH, MAX_PROPERTIES, MAX_ENUM_VALUES = 10, 5000, 1000
_MAX_POINTER = 256  # deeper than any schema OpenAI takes: stop before Python's stack does


class StrictFinding(NamedTuple):
    """One place a schema is outside the subset; ``fixable`` when a strict form still exists."""

    pointer: str
    rule: str
    fixable: bool

    def __str__(self) -> str:
        how = "adjusted" if self.fixable else "cannot be sent strict"
        return f"{self.pointer or '/'}: {self.rule} ({how})"


class StrictForm(NamedTuple):
    """A schema brought into the subset: ``schema`` is None when no strict form exists."""

    schema: dict[str, Any] | None
    findings: tuple[StrictFinding, ...] = ()

    @property
    def blocking(self) -> tuple[StrictFinding, ...]:
        return tuple(f for f in self.findings if not f.fixable)


class OutputSchemaStrictError(InvalidData):
    """An output schema strict mode cannot accept, each offending pointer named."""

    code = codes.OUTPUT_SCHEMA_STRICT

    def __init__(self, findings: tuple[StrictFinding, ...], what: str = "output schema") -> None:
        listed = "; ".join(str(f) for f in findings)
        super().__init__(f"{what} is outside OpenAI's structured-outputs subset: {listed}")
        self.findings = findings


@dataclass
class _Walk:
    root: Mapping[str, Any]
    findings: list[StrictFinding] = field(default_factory=list)
    properties: int = 0
    enum_values: int = 0

    def note(self, pointer: list[object], rule: str, *, fixable: bool) -> None:
        self.findings.append(StrictFinding(json_pointer(pointer), rule, fixable))

    def resolve(self, ref: str) -> Any:
        node: Any = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = part.replace("~1", "/").replace("~0", "~")
            node = node.get(part) if isinstance(node, Mapping) else None
        return node

    def schema(self, node: Any, at: list[object], depth: int) -> Any:
        if not isinstance(node, Mapping) or len(at) > _MAX_POINTER:
            self.note(at, _ANY, fixable=False)
            return node
        ref = node.get("$ref")
        if isinstance(ref, str) and len(node) > 1 and ref.startswith("#"):
            target = self.resolve(ref)
            if isinstance(target, Mapping) and "$ref" not in target:
                self.note(at, "a $ref must stand alone: its target is inlined", fixable=True)
                merged = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
                return self.schema(merged, at, depth)
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key in _KEEP:
                out[key] = value
            elif key == "oneOf" and isinstance(value, list) and "anyOf" not in node:
                self.note([*at, key], "oneOf is not in the subset: sent as anyOf", fixable=True)
                out["anyOf"] = value
            elif key == "allOf" and isinstance(value, list) and len(value) == 1:
                if isinstance(value[0], Mapping):
                    self.note([*at, key], "allOf of one entry is merged", fixable=True)
                    merged = {**value[0], **{k: v for k, v in node.items() if k != "allOf"}}
                    return self.schema(merged, at, depth)
                self.note([*at, key], _REFUSED[key], fixable=False)
            elif key in _REFUSED:
                self.note([*at, key], _REFUSED[key], fixable=False)
            else:  # left out of what is sent, still enforced locally
                self.note([*at, key], "not in the subset", fixable=True)
        self._check(node, out, at, depth)
        return self._children(out, at, depth)

    def _check(
        self, node: Mapping[str, Any], out: dict[str, Any], at: list[object], depth: int
    ) -> None:
        kind = out.get("type")
        kinds = kind if isinstance(kind, list) else [kind] if kind is not None else []
        if any(not isinstance(k, str) or k not in _TYPES for k in kinds):
            self.note([*at, "type"], "type must name JSON Schema types", fixable=False)
        if not ({"type", "enum", "const", "anyOf", "$ref"} & out.keys()):
            self.note(at, _ANY, fixable=False)
        ref = out.get("$ref")
        if "$ref" in out and not (isinstance(ref, str) and ref.startswith("#")):
            self.note([*at, "$ref"], "$ref must point inside this schema (#...)", fixable=False)
        if "format" in out and not (isinstance(out["format"], str) and out["format"] in _FORMATS):
            self.note([*at, "format"], "format must be one the subset knows", fixable=True)
            del out["format"]
        if isinstance(out.get("enum"), list):
            self.enum_values += len(out["enum"])
        if "array" in kinds and "items" not in out and "prefixItems" not in node:
            self.note(at, "an array must declare items (this one accepts any)", fixable=False)
        if "object" in kinds or "properties" in out:
            if depth >= MAX_DEPTH:
                self.note(at, f"at most {MAX_DEPTH} levels of nested objects", fixable=False)
            names = list(out["properties"]) if isinstance(out.get("properties"), Mapping) else []
            extra = out.get("additionalProperties")
            if extra is not False and (extra is not None or not names):
                self.note(at, _OPEN, fixable=False)
            elif extra is None:  # declared properties: closed as openai-python closes them
                self.note(at, "additionalProperties: false is added", fixable=True)
                out["additionalProperties"] = False
            self.properties += len(names)
            required = out.get("required")
            listed = required if isinstance(required, list) else ()
            if not all(isinstance(r, str) for r in listed) or set(listed) != set(names):
                self.note([*at, "required"], "every property must be required", fixable=True)
                out["required"] = names

    def _children(self, out: dict[str, Any], at: list[object], depth: int) -> dict[str, Any]:
        for key in ("properties", "items", "anyOf", "$defs", "definitions"):  # findings' order
            value, here = out.get(key), [*at, key]
            if key == "items" and key in out:
                out[key] = self.schema(value, here, depth)
            elif key == "anyOf" and isinstance(value, list):
                out[key] = [self.schema(sub, [*here, i], depth) for i, sub in enumerate(value)]
            elif key not in ("items", "anyOf") and isinstance(value, Mapping):
                inner = depth + 1 if key == "properties" else depth
                out[key] = {k: self.schema(sub, [*here, k], inner) for k, sub in value.items()}
        return out


def to_strict_schema(schema: Mapping[str, Any]) -> StrictForm:
    """``schema`` brought into the subset (as new dicts), or None, and every finding."""
    walk = _Walk(schema)
    if not isinstance(schema, Mapping):
        return StrictForm(None, (StrictFinding("", _ROOT, False),))
    strict = walk.schema(schema, [], 0)
    kind = schema.get("type")
    if "object" not in (kind if isinstance(kind, list) else [kind]):
        walk.note([], _ROOT, fixable=False)
    if walk.properties > MAX_PROPERTIES:
        walk.note([], f"at most {MAX_PROPERTIES} object properties in all", fixable=False)
    if walk.enum_values > MAX_ENUM_VALUES:
        walk.note([], f"at most {MAX_ENUM_VALUES} enum values in all", fixable=False)
    findings = tuple(walk.findings)
    blocked = any(not f.fixable for f in findings)
    return StrictForm(None if blocked else strict, findings)


def model_output_schema(model: type[BaseModel], *, strict: bool = False) -> dict[str, Any]:
    """The schema openai-python sends for ``response_format=model`` (the core imports no
    provider SDK); ``strict=True`` refuses a model with no strict form."""
    from pydantic import BaseModel

    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise InvalidData("model_output_schema takes a pydantic model class")
    schema = model.model_json_schema()
    derived: dict[str, Any] = _sdk_strict(schema, schema)
    if strict and (blocking := to_strict_schema(derived).blocking):
        raise OutputSchemaStrictError(blocking, f"output model {model.__name__}")
    return derived


def _sdk_strict(node: Any, root: dict[str, Any]) -> Any:
    """openai-python's ``_ensure_strict_json_schema`` rules (src/openai/lib/_pydantic.py)."""
    if not isinstance(node, dict):
        return node
    for sub in (node.get("$defs") or {}).values():  # pydantic writes no "definitions"
        _sdk_strict(sub, root)
    if node.get("type") == "object" and "additionalProperties" not in node:
        node["additionalProperties"] = False
    if isinstance(node.get("properties"), dict):
        node["required"] = list(node["properties"])
        node["properties"] = {k: _sdk_strict(v, root) for k, v in node["properties"].items()}
    if isinstance(node.get("items"), dict):
        node["items"] = _sdk_strict(node["items"], root)
    if isinstance(node.get("anyOf"), list):
        node["anyOf"] = [_sdk_strict(v, root) for v in node["anyOf"]]
    if isinstance(node.get("allOf"), list):
        if len(node["allOf"]) == 1:
            node.update(_sdk_strict(node.pop("allOf")[0], root))
        else:
            node["allOf"] = [_sdk_strict(v, root) for v in node["allOf"]]
    if "default" in node and node["default"] is None:
        del node["default"]
    ref = node.get("$ref")
    if isinstance(ref, str) and len(node) > 1 and ref.startswith("#/"):
        target: Any = root
        for part in ref[2:].split("/"):
            target = target[part]
        node.update({**target, **node})
        del node["$ref"]
        return _sdk_strict(node, root)
    return node
