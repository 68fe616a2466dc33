"""Draft 2020-12 validation (formats enforced, no remote ``$ref``, linear-time patterns), cached,
and its failures built from the schema, never from messages quoting the instance (a secret):
a pointer shows an object key only when the schema declares it (any other is ``*``)."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from typing import Any, Final, Protocol

import jsonschema_rs
import orjson

from ._canonical import canonical_json, is_frozen, json_pointer, thaw
from ._errors import InvalidData

_CACHE_SIZE: Final = 512
_LINEAR: Final = jsonschema_rs.RegexOptions()  # default size limits bound each pattern's memory
_SUBSET: Final = (
    "patterns may not use lookaround or backreferences, which cannot match in linear time"
)
MAX_FAILURES: Final = 20
"""At most this many failures are reported per validated value; the rest are counted."""
_MAX_SCHEMA_TEXT: Final = 120
_COUNT_LIMIT: Final = 1000


class SchemaValidator(Protocol):
    """A compiled JSON Schema (jsonschema-rs's validator, or any object with these methods)."""

    def is_valid(self, instance: Any) -> bool: ...


def _no_remote_refs(uri: str) -> Any:
    raise ValueError(f"remote $ref retrieval is disabled ({uri})")


@functools.lru_cache(maxsize=_CACHE_SIZE)
def _compiled(key: bytes) -> SchemaValidator:
    """The validator of the schema whose canonical JSON is ``key``."""
    schema = json.loads(key)
    if not isinstance(schema, (dict, bool)):
        raise InvalidData("must be a JSON Schema object or boolean")
    if not jsonschema_rs.meta.is_valid(schema):
        raise InvalidData("is not a valid Draft 2020-12 JSON Schema")
    try:
        validator: SchemaValidator = jsonschema_rs.Draft202012Validator(
            schema, validate_formats=True, retriever=_no_remote_refs, pattern_options=_LINEAR
        )
    except (jsonschema_rs.ValidationError, ValueError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        if first_line.endswith('is not a "regex"'):
            first_line += f" ({_SUBSET})"
        raise InvalidData(f"cannot be compiled: {first_line}") from None
    return validator


# An entry holds its schema, so the id cannot be recycled while cached, and a frozen
# schema cannot change under it: no re-serializing an interaction's output_schema per call.
_BY_IDENTITY: dict[int, tuple[Any, SchemaValidator]] = {}


def compile_schema(schema: Any, *, what: str = "output_schema") -> SchemaValidator:
    """Return a (cached) Draft 2020-12 validator; ``InvalidData`` names ``what`` if invalid."""
    hit = _BY_IDENTITY.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    key = canonical_json(schema)
    try:
        validator = _compiled(key)
    except InvalidData as error:
        raise InvalidData(f"{what} {error}") from None
    if is_frozen(schema):
        if len(_BY_IDENTITY) >= _CACHE_SIZE:
            _BY_IDENTITY.clear()
        _BY_IDENTITY[id(schema)] = (schema, validator)
    return validator


def _schema_text(value: Any) -> str:
    text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    if isinstance(value, list):
        text = "[" + ", ".join(orjson.dumps(item).decode() for item in value) + "]"
    if len(text) > _MAX_SCHEMA_TEXT:
        text = text[: _MAX_SCHEMA_TEXT - 1] + "…"
    return text


def declared_names(schema: Any) -> frozenset[str]:
    """Every property name the schema declares, at any depth: the keys a pointer may show."""
    names: set[str] = set()
    pending = [schema]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            pending.extend(node if isinstance(node, list) else ())
            continue
        properties, dependent = node.get("properties"), node.get("dependentRequired")
        listed = [node.get("required")]
        if isinstance(properties, dict):
            listed.append(list(properties))
        if isinstance(dependent, dict):
            listed += [list(dependent), *dependent.values()]
        for items in listed:
            if isinstance(items, list):
                names.update(item for item in items if isinstance(item, str))
        pending.extend(node.values())
    return frozenset(names)


def _value_at(instance: Any, path: list[str | int]) -> Any:
    for segment in path:
        if isinstance(instance, list) and isinstance(segment, int):
            instance = instance[segment] if 0 <= segment < len(instance) else None
        elif isinstance(instance, dict):
            instance = instance.get(str(segment))
        else:
            return None
    return instance


def _pointer(path: list[str | int], names: frozenset[str], instance: Any) -> str:
    # The instance decides whether a segment is an index (the validator reports a key that
    # looks like a number as a number).
    parts: list[str | int] = []
    for segment in path:
        is_index = isinstance(instance, list) and isinstance(segment, int)
        parts.append(segment if is_index or str(segment) in names else "*")
        instance = _value_at(instance, [segment])
    return json_pointer(parts)


_JSON_TYPES: Final = {
    dict: "object",
    list: "array",
    str: "string",
    bool: "boolean",
    int: "integer",
    float: "number",
    type(None): "null",
}

_RULES: Final = {  # keyword: the rule, ``{}`` the schema's value under that detail
    "minLength": ("shorter than minLength {}", "limit"),
    "maxLength": ("longer than maxLength {}", "limit"),
    "minimum": ("less than minimum {}", "limit"),
    "maximum": ("greater than maximum {}", "limit"),
    "exclusiveMinimum": ("not greater than exclusiveMinimum {}", "limit"),
    "exclusiveMaximum": ("not less than exclusiveMaximum {}", "limit"),
    "minItems": ("fewer items than minItems {}", "limit"),
    "maxItems": ("more items than maxItems {}", "limit"),
    "minProperties": ("fewer properties than minProperties {}", "limit"),
    "maxProperties": ("more properties than maxProperties {}", "limit"),
    "enum": ("not one of the enum {}", "options"),
    "const": ("not equal to const {}", "expected_value"),
    "multipleOf": ("not a multiple of multipleOf {}", "multiple_of"),
    "pattern": ("does not match pattern {}", "pattern"),
    "format": ("not a valid {} (format)", "format"),
    "required": ("missing (required)", None),
    "uniqueItems": ("items are not unique (uniqueItems)", None),
    "anyOf": ("matches none of the anyOf alternatives", None),
    "oneOf": ("does not match exactly one of the oneOf alternatives", None),
    "not": ("matches the schema under not", None),
    "falseSchema": ("not allowed (the schema is false)", None),
}


def _rule(keyword: str, details: dict[str, Any], instance: Any) -> str:
    if keyword == "type":
        types = details.get("types") or []
        wanted = " or ".join(str(t) for t in types) if types else "the declared type"
        got = _JSON_TYPES.get(type(instance), type(instance).__name__)
        return f"not of type {wanted} (got {got})"
    if keyword in ("additionalProperties", "unevaluatedProperties"):
        count = len(details.get("unexpected") or ())
        if not count:
            return f"properties not allowed by {keyword}"
        return f"{count} {'property' if count == 1 else 'properties'} not allowed by {keyword}"
    if keyword not in _RULES:
        return f"fails {keyword}"
    text, detail = _RULES[keyword]
    if detail is None:
        return text
    value = details.get(detail)
    return text.format(value if detail == "limit" else _schema_text(value))


# jsonschema-rs names its error kinds after the keyword, in PascalCase, but for these.
_RENAMED: Final = {"Constant": "const", "OneOfMultipleValid": "oneOf", "OneOfNotValid": "oneOf"}
# A ``false`` schema under these keywords fails as the keyword (``additionalProperties: false``).
_FALSE_AS: Final = [
    "additionalItems",
    "additionalProperties",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
]


def _failures(validator: Any, instance: Any, names: frozenset[str]) -> Iterator[tuple[str, str]]:
    for error in validator.iter_errors(instance):
        kind, schema_path = type(error.kind).__name__, list(error.schema_path)
        keyword = _RENAMED.get(kind, kind[:1].lower() + kind[1:])
        if kind == "FalseSchema" and schema_path and schema_path[-1] in _FALSE_AS:
            keyword = schema_path[-1]
        path = list(error.instance_path)
        details = error.kind.as_dict()
        rule = _rule(keyword, details, _value_at(instance, path))
        missing = details.get("property")
        if keyword == "required" and isinstance(missing, str):
            path.append(missing)
        yield _pointer(path, names, instance), rule


def schema_messages(
    validator: Any, schema: Any, instance: Any, prefix: str = ""
) -> list[tuple[str, str]]:
    """(pointer, message) per failed rule (``/priority: not one of the enum [1, 2, 3]``, the
    pointer relative to ``instance``, named ``prefix`` in the message), at most
    ``MAX_FAILURES``, then the count of the rest; ``validator`` is ``schema`` compiled."""
    failures = _failures(validator, instance, declared_names(thaw(schema)))
    found = [
        (pointer, f"{prefix + pointer or '/'}: {rule}")
        for pointer, rule in itertools.islice(failures, MAX_FAILURES)
    ]
    if more := sum(1 for _ in itertools.islice(failures, _COUNT_LIMIT)):
        bound = "at least " if more >= _COUNT_LIMIT else ""
        found.append(("", f"{prefix or '/'}: {bound}{more} more schema failure(s) not shown"))
    return found
