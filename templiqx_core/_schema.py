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

from ._canonical import canonical_json
from ._errors import InvalidData
from ._frozen import is_frozen, thaw

__all__ = ["SchemaValidator", "compile_schema"]

_CACHE_SIZE = 512
#: Linear-time matching; the default size limits bound each compiled pattern's memory.
_LINEAR = jsonschema_rs.RegexOptions()
_SUBSET = "patterns may not use lookaround or backreferences, which cannot match in linear time"


class SchemaValidator(Protocol):
    def is_valid(self, instance: Any) -> bool: ...


def _no_remote_refs(uri: str) -> Any:
    raise ValueError(f"remote $ref retrieval is disabled ({uri})")


class _ValidatorCache:
    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[bytes, SchemaValidator] = OrderedDict()
        # Identity fast path for frozen schemas (an interaction's output_schema, reused
        # call after call): no re-serializing. The entry holds the object, so its id
        # cannot be recycled while cached; a frozen schema cannot change under it.
        self._by_identity: OrderedDict[int, tuple[Any, SchemaValidator]] = OrderedDict()

    def get(self, schema: Any, *, what: str) -> SchemaValidator:
        hit = self._by_identity.get(id(schema))
        if hit is not None and hit[0] is schema:
            return hit[1]
        validator = self._get_by_content(schema, what=what)
        if not is_frozen(schema):
            return validator
        with self._lock:
            self._by_identity[id(schema)] = (schema, validator)
            if len(self._by_identity) > self._size:
                self._by_identity.popitem(last=False)
        return validator

    def _get_by_content(self, schema: Any, *, what: str) -> SchemaValidator:
        key = canonical_json(schema)
        with self._lock:
            found = self._entries.get(key)
            if found is not None:
                self._entries.move_to_end(key)
                return found
        validator = _build(schema, what=what)
        with self._lock:
            self._entries[key] = validator
            if len(self._entries) > self._size:
                self._entries.popitem(last=False)
        return validator


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


_CACHE = _ValidatorCache(_CACHE_SIZE)


def compile_schema(schema: Any, *, what: str = "output_schema") -> SchemaValidator:
    """Return a (cached) Draft 2020-12 validator; ``InvalidData`` names ``what`` if invalid."""
    return _CACHE.get(schema, what=what)
