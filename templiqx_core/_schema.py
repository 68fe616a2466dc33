"""Draft 2020-12 validation (formats, no remote ``$ref``, linear-time patterns), cached; failures
name the schema's rule, never the instance (a secret), and only the keys the schema declares."""

from __future__ import annotations

import functools
import itertools
import json
from collections.abc import Iterator
from typing import Any, Final, Protocol

import jsonschema_rs

from ._canonical import FrozenDict, canonical_json, json_pointer, thaw
from ._errors import InvalidData

_CACHE_SIZE: Final = 512
_LINEAR: Final = jsonschema_rs.RegexOptions()  # default size limits bound each pattern's memory
MAX_FAILURES: Final = 20
"""At most this many failures are reported per validated value; the rest are counted."""
_MAX_RULE: Final = 160
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
    if isinstance(schema, FrozenDict):
        if len(_BY_IDENTITY) >= _CACHE_SIZE:
            _BY_IDENTITY.clear()
        _BY_IDENTITY[id(schema)] = (schema, validator)
    return validator


def declared_names(schema: Any) -> frozenset[str]:
    """Every property name the schema declares, at any depth: the keys a pointer may show."""
    names: set[str] = set()
    pending = [schema]
    while pending:
        node = pending.pop()
        if not isinstance(node, dict):
            pending.extend(node if isinstance(node, list) else ())
            continue
        properties, required = node.get("properties"), node.get("required")
        names.update(properties if isinstance(properties, dict) else ())
        listed = required if isinstance(required, list) else ()
        names.update(name for name in listed if isinstance(name, str))
        pending.extend(node.values())
    return frozenset(names)


def _pointer(path: list[str | int], names: frozenset[str], instance: Any) -> str:
    # The instance decides whether a segment is an index (the validator reports a key that
    # looks like a number as a number).
    parts: list[str | int] = []
    for segment in path:
        if isinstance(instance, list) and isinstance(segment, int):
            parts.append(segment)
            instance = instance[segment] if 0 <= segment < len(instance) else None
        else:
            parts.append(segment if str(segment) in names else "*")
            instance = instance.get(str(segment)) if isinstance(instance, dict) else None
    return json_pointer(parts)


#: What a failed rule shows: the schema's value under its keyword, never the instance's.
_SHOWN: Final = ("limit", "multiple_of", "options", "expected_value", "pattern", "format")


def _rule(keyword: str, details: dict[str, Any]) -> str:
    if keyword == "required":
        return "missing (required)"
    if keyword == "type":
        return "not of type " + " or ".join(details.get("types") or ["the declared type"])
    shown = [json.dumps(details[key], sort_keys=True) for key in _SHOWN if key in details]
    text = " ".join([f"fails {keyword}", *shown])
    return text if len(text) <= _MAX_RULE else text[: _MAX_RULE - 1] + "…"


# jsonschema-rs names its error kinds after the keyword, in PascalCase, but for these.
_RENAMED: Final = {"Constant": "const", "OneOfMultipleValid": "oneOf", "OneOfNotValid": "oneOf"}
# A ``false`` schema under these keywords fails as the keyword (``additionalProperties: false``).
_FALSE_AS: Final = {"additionalProperties", "unevaluatedProperties", "propertyNames", "items"}


def _failures(validator: Any, instance: Any, names: frozenset[str]) -> Iterator[tuple[str, str]]:
    for error in validator.iter_errors(instance):
        kind, schema_path = type(error.kind).__name__, list(error.schema_path)
        keyword = _RENAMED.get(kind, kind[:1].lower() + kind[1:])
        if kind == "FalseSchema" and schema_path and schema_path[-1] in _FALSE_AS:
            keyword = str(schema_path[-1])
        path = list(error.instance_path)
        details = error.kind.as_dict()
        rule = _rule(keyword, details)
        missing = details.get("property")
        if keyword == "required" and isinstance(missing, str):
            path.append(missing)
        yield _pointer(path, names, instance), rule


def schema_messages(
    validator: Any, schema: Any, instance: Any, prefix: str = ""
) -> list[tuple[str, str]]:
    """(pointer, ``/priority: fails enum [1, 2, 3]``) per failed rule, at most ``MAX_FAILURES``,
    then the count of the rest; ``prefix`` names ``instance`` in the message."""
    failures = _failures(validator, instance, declared_names(thaw(schema)))
    found = [
        (pointer, f"{prefix + pointer or '/'}: {rule}")
        for pointer, rule in itertools.islice(failures, MAX_FAILURES)
    ]
    if more := sum(1 for _ in itertools.islice(failures, _COUNT_LIMIT)):
        bound = "at least " if more >= _COUNT_LIMIT else ""
        found.append(("", f"{prefix or '/'}: {bound}{more} more schema failure(s) not shown"))
    return found
