"""Schema failures as people read them: the failing value's JSON pointer and the rule.

Each failure becomes one ``SchemaFailure``: where (a JSON pointer relative to the value
validated) and why (the keyword and the schema's own value for it, e.g. ``shorter than
minLength 1``). Texts are built here from the schema, never from the validator's messages,
which quote the instance: the instance may be a provider's reply or a secret. For the same
reason a pointer shows an object key only when the schema declares that name (a key
matched by ``additionalProperties`` or ``patternProperties`` is the instance's text and
reads ``*``); array indices are shown as they are.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Final

import orjson

from ._frozen import thaw

__all__ = [
    "MAX_FAILURES",
    "SchemaFailure",
    "declared_names",
    "more_failures",
    "schema_failures",
]

MAX_FAILURES: Final = 20
"""At most this many failures are reported per validated value; the rest are counted."""
_MAX_SCHEMA_TEXT: Final = 120
_COUNT_LIMIT: Final = 1000


@dataclass(frozen=True)
class SchemaFailure:
    """One failed rule: ``pointer`` (relative, ``""`` for the value itself) and ``rule``."""

    pointer: str
    rule: str
    keyword: str

    def message(self, prefix: str = "") -> str:
        """``/priority: not one of the enum [1, 2, 3]`` (the pointer after ``prefix``)."""
        return f"{prefix + self.pointer or '/'}: {self.rule}"


def _escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def more_failures(count: int) -> str:
    """The text standing for failures past the reported ones."""
    bound = "at least " if count >= _COUNT_LIMIT else ""
    return f"{bound}{count} more schema failure(s) not shown"


def _schema_text(value: Any) -> str:
    """A schema value as compact JSON, ``, `` between items, bounded in length."""
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    if isinstance(value, list):
        text = "[" + ", ".join(orjson.dumps(item).decode() for item in value) + "]"
    if len(text) > _MAX_SCHEMA_TEXT:
        text = text[: _MAX_SCHEMA_TEXT - 1] + "…"
    return text


def declared_names(schema: Any) -> frozenset[str]:
    """Every property name the schema declares (``properties``, ``required``,
    ``dependentRequired``), at any depth: the only keys a pointer may show."""
    names: set[str] = set()
    pending = [schema]
    while pending:
        node = pending.pop()
        if isinstance(node, list):
            pending.extend(node)
            continue
        if not isinstance(node, dict):
            continue
        properties = node.get("properties")
        if isinstance(properties, dict):
            names.update(key for key in properties if isinstance(key, str))
        for key in ("required",):
            listed = node.get(key)
            if isinstance(listed, list):
                names.update(item for item in listed if isinstance(item, str))
        dependent = node.get("dependentRequired")
        if isinstance(dependent, dict):
            names.update(key for key in dependent if isinstance(key, str))
            for listed in dependent.values():
                if isinstance(listed, list):
                    names.update(item for item in listed if isinstance(item, str))
        pending.extend(node.values())
    return frozenset(names)


def _pointer(path: list[str | int], names: frozenset[str], instance: Any) -> str:
    """The pointer along ``path`` in ``instance``: an array index as is, an object key
    only if declared. The instance decides which a segment is (the validator reports a
    key that looks like a number as a number)."""
    parts = []
    node = instance
    for segment in path:
        if isinstance(node, list) and isinstance(segment, int):
            parts.append(str(segment))
            node = node[segment] if 0 <= segment < len(node) else None
            continue
        key = str(segment)
        parts.append(_escape(key) if key in names else "*")
        node = node.get(key) if isinstance(node, dict) else None
    return "".join("/" + part for part in parts)


_JSON_TYPES: Final = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}


def _type_of(value: Any) -> str:
    return _JSON_TYPES.get(type(value), type(value).__name__)


def _rule(keyword: str, details: dict[str, Any], instance_type: str) -> str:
    """The rule that failed, in words, from the schema's values only."""
    limit = details.get("limit")
    if keyword == "type":
        types = details.get("types") or []
        wanted = " or ".join(str(t) for t in types) if types else "the declared type"
        return f"not of type {wanted} (got {instance_type})"
    if keyword == "enum":
        return f"not one of the enum {_schema_text(details.get('options'))}"
    if keyword == "const":
        return f"not equal to const {_schema_text(details.get('expected_value'))}"
    if keyword == "minLength":
        return f"shorter than minLength {limit}"
    if keyword == "maxLength":
        return f"longer than maxLength {limit}"
    if keyword == "minimum":
        return f"less than minimum {limit}"
    if keyword == "maximum":
        return f"greater than maximum {limit}"
    if keyword == "exclusiveMinimum":
        return f"not greater than exclusiveMinimum {limit}"
    if keyword == "exclusiveMaximum":
        return f"not less than exclusiveMaximum {limit}"
    if keyword == "minItems":
        return f"fewer items than minItems {limit}"
    if keyword == "maxItems":
        return f"more items than maxItems {limit}"
    if keyword == "minProperties":
        return f"fewer properties than minProperties {limit}"
    if keyword == "maxProperties":
        return f"more properties than maxProperties {limit}"
    if keyword == "multipleOf":
        return f"not a multiple of multipleOf {_schema_text(details.get('multiple_of'))}"
    if keyword == "pattern":
        return f"does not match pattern {_schema_text(details.get('pattern'))}"
    if keyword == "format":
        return f"not a valid {_schema_text(details.get('format'))} (format)"
    if keyword == "required":
        return "missing (required)"
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        count = len(details.get("unexpected") or ())
        if not count:
            return f"properties not allowed by {keyword}"
        noun = "property" if count == 1 else "properties"
        return f"{count} {noun} not allowed by {keyword}"
    if keyword == "uniqueItems":
        return "items are not unique (uniqueItems)"
    if keyword == "anyOf":
        return "matches none of the anyOf alternatives"
    if keyword == "oneOf":
        return "does not match exactly one of the oneOf alternatives"
    if keyword == "not":
        return "matches the schema under not"
    if keyword == "falseSchema":
        return "not allowed (the schema is false)"
    return f"fails {keyword}"


# jsonschema-rs names its error kinds after the keyword, in PascalCase.
_KEYWORDS: Final = {
    "AdditionalItems": "additionalItems",
    "AdditionalProperties": "additionalProperties",
    "AnyOf": "anyOf",
    "Constant": "const",
    "Contains": "contains",
    "ContentEncoding": "contentEncoding",
    "ContentMediaType": "contentMediaType",
    "Enum": "enum",
    "ExclusiveMaximum": "exclusiveMaximum",
    "ExclusiveMinimum": "exclusiveMinimum",
    "FalseSchema": "falseSchema",
    "Format": "format",
    "MaxItems": "maxItems",
    "MaxLength": "maxLength",
    "MaxProperties": "maxProperties",
    "Maximum": "maximum",
    "MinItems": "minItems",
    "MinLength": "minLength",
    "MinProperties": "minProperties",
    "Minimum": "minimum",
    "MultipleOf": "multipleOf",
    "Not": "not",
    "OneOfMultipleValid": "oneOf",
    "OneOfNotValid": "oneOf",
    "Pattern": "pattern",
    "PropertyNames": "propertyNames",
    "Required": "required",
    "Type": "type",
    "UnevaluatedItems": "unevaluatedItems",
    "UnevaluatedProperties": "unevaluatedProperties",
    "UniqueItems": "uniqueItems",
}


def _keyword(error: Any) -> str:
    kind = type(error.kind).__name__
    path = list(error.schema_path)
    last = path[-1] if path and isinstance(path[-1], str) else None
    if kind == "FalseSchema" and last is not None and last in _KEYWORDS.values():
        return last  # e.g. additionalProperties: false with no properties declared
    keyword = _KEYWORDS.get(kind)
    if keyword is not None:
        return keyword
    return last or kind


def _value_at(instance: Any, path: list[str | int]) -> Any:
    for segment in path:
        if isinstance(instance, list) and isinstance(segment, int):
            instance = instance[segment] if 0 <= segment < len(instance) else None
        elif isinstance(instance, dict):
            instance = instance.get(str(segment))
        else:
            return None
    return instance


def _failures(validator: Any, instance: Any, names: frozenset[str]) -> Iterator[SchemaFailure]:
    for error in validator.iter_errors(instance):
        keyword = _keyword(error)
        path = list(error.instance_path)
        details = error.kind.as_dict()
        if keyword == "required":
            missing = details.get("property")
            if isinstance(missing, str):
                path.append(missing)
        failing = _value_at(instance, list(error.instance_path))
        rule = _rule(keyword, details, _type_of(failing))
        yield SchemaFailure(_pointer(path, names, instance), rule, keyword)


def schema_failures(
    validator: Any, schema: Any, instance: Any, *, limit: int = MAX_FAILURES
) -> tuple[list[SchemaFailure], int]:
    """The first ``limit`` failures of ``instance`` and how many more there are (counted
    up to a bound). ``validator`` is ``schema`` compiled (``compile_schema``)."""
    names = declared_names(thaw(schema))
    found: list[SchemaFailure] = []
    more = 0
    for failure in _failures(validator, instance, names):
        if len(found) < limit:
            found.append(failure)
        else:
            more += 1
            if more >= _COUNT_LIMIT:
                break
    return found, more
