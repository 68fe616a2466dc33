"""Draft 2020-12 output validation with ``date``/``date-time`` formats enforced.

Validators are compiled once per distinct schema (keyed by its canonical JSON) and reused
across threads: jsonschema-rs validators are immutable and safe to share. Only a frozen
schema (an interaction's ``output_schema``) is also remembered by identity: a plain dict
may change in place, so it is looked up by content every time. Remote ``$ref``
retrieval is refused so that validating never touches the network.

Patterns (``pattern``, ``patternProperties``) run on the Rust ``regex`` engine, whose
matching time is linear in the string: the default backtracking engine lets a lookaround
take time quadratic in it (seconds for a reply well under the size limit). Its syntax is
the safe subset — no lookaround, no backreferences —, so a pattern outside it is refused
when the schema is compiled, not met while a value is validated.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Protocol

import jsonschema_rs

from ._canonical import canonical_json, is_frozen, thaw
from ._errors import InvalidData

_CACHE_SIZE = 512
#: Linear-time matching; the default size limits bound each compiled pattern's memory.
_LINEAR = jsonschema_rs.RegexOptions()
_SUBSET = "patterns may not use lookaround or backreferences, which cannot match in linear time"


class SchemaValidator(Protocol):
    def is_valid(self, instance: Any) -> bool: ...


def _no_remote_refs(uri: str) -> Any:
    raise ValueError(f"remote $ref retrieval is disabled ({uri})")


def _build(schema: Any, *, what: str) -> SchemaValidator:
    if not isinstance(schema, (dict, bool)):
        raise InvalidData(f"{what} must be a JSON Schema object or boolean")
    schema = thaw(schema)  # jsonschema-rs takes exact dict/list types, not frozen ones
    if not jsonschema_rs.meta.is_valid(schema):
        raise InvalidData(f"{what} is not a valid Draft 2020-12 JSON Schema")
    try:
        validator: SchemaValidator = jsonschema_rs.Draft202012Validator(
            schema, validate_formats=True, retriever=_no_remote_refs, pattern_options=_LINEAR
        )
    except (jsonschema_rs.ValidationError, ValueError) as error:
        first_line = str(error).splitlines()[0] if str(error) else type(error).__name__
        if first_line.endswith('is not a "regex"'):
            first_line += f" ({_SUBSET})"
        raise InvalidData(f"{what} cannot be compiled: {first_line}") from None
    return validator


_LOCK = threading.Lock()
_BY_CONTENT: OrderedDict[bytes, SchemaValidator] = OrderedDict()
# Frozen schemas also by identity (no re-serializing): an entry holds its schema, so the
# id cannot be recycled while cached, and a frozen schema cannot change under it.
_BY_IDENTITY: OrderedDict[int, tuple[Any, SchemaValidator]] = OrderedDict()


def _remember(cache: OrderedDict[Any, Any], key: Any, entry: Any) -> None:
    with _LOCK:  # least recently used first out
        cache[key] = entry
        cache.move_to_end(key)
        if len(cache) > _CACHE_SIZE:
            cache.popitem(last=False)


def compile_schema(schema: Any, *, what: str = "output_schema") -> SchemaValidator:
    """Return a (cached) Draft 2020-12 validator; ``InvalidData`` names ``what`` if invalid."""
    hit = _BY_IDENTITY.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    key = canonical_json(schema)
    with _LOCK:
        validator = _BY_CONTENT.get(key)
    if validator is None:
        validator = _build(schema, what=what)
    _remember(_BY_CONTENT, key, validator)
    if is_frozen(schema):
        _remember(_BY_IDENTITY, id(schema), (schema, validator))
    return validator
