"""JSON values as the reference's serde_json writes them: canonical bytes (orjson with sorted
keys), fingerprints, wire text, and frozen containers (so a cached fingerprint holds)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NoReturn

import orjson

from ._errors import InvalidData

_OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)  # subclasses of str/int/dict/list (frozen containers) encode like their base
MAX_DEPTH: Final = 254
"""Nesting past orjson's own limit is not canonical JSON (the reference's parser stops at 128)."""
_I64_MIN: Final = -(2**63)
_U64_MAX: Final = 2**64 - 1
_F64_LIMIT = 2**1024  # float() of anything this large overflows


class NotJson(InvalidData):
    """A value that has no canonical JSON form; ``pointer`` says where, ``reason`` what."""

    def __init__(self, reason: str, pointer: str, *, what: str = "value") -> None:
        super().__init__(f"canonical JSON: {what} at {pointer or '/'} is {reason}")
        self.reason = reason
        self.pointer = pointer


def canonical_json(value: Any) -> bytes:
    """The canonical UTF-8 JSON bytes of a JSON value; ``NotJson`` if it is none."""
    try:
        data = orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:  # integers beyond 64 bits, or a part with no JSON form
        return orjson.dumps(_serde(value, []), option=_OPTIONS)
    if b"null" in data:  # orjson writes NaN and Infinity as null: rule them out
        try:  # the standard library refuses them, at C speed
            json.dumps(value, allow_nan=False)
        except ValueError:
            _serde(value, [])  # names the first one
    return data


def fingerprint(value: Any) -> str:
    """SHA-256 hex digest of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def json_pointer(segments: Iterable[object]) -> str:
    """RFC 6901 pointer of ``segments``; a lone surrogate shows escaped (messages must print)."""
    text = "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in segments)
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


def _serde(value: Any, path: list[str]) -> Any:
    """``value`` as serde_json holds it (integers past 64 bits as f64), else ``NotJson``."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise NotJson("a string with a lone surrogate", json_pointer(path)) from None
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotJson(f"a non-finite number ({value})", json_pointer(path))
        return float(value)  # orjson refuses float subclasses (numpy.float64)
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if _I64_MIN <= value <= _U64_MAX:
            return value
        if abs(value) >= _F64_LIMIT:
            raise NotJson("an integer beyond the f64 range", json_pointer(path))
        return float(value)
    is_array = isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray))
    if not (is_array or isinstance(value, Mapping)):
        raise NotJson(f"{type(value).__name__}, not a JSON value", json_pointer(path))
    if len(path) >= MAX_DEPTH:
        raise NotJson(f"nested deeper than {MAX_DEPTH} levels", json_pointer(path))
    if is_array:
        return [_serde(item, [*path, str(index)]) for index, item in enumerate(value)]
    for key in value:
        if not isinstance(key, str):
            reason = f"{type(key).__name__}, not a string"
            raise NotJson(reason, json_pointer(path), what="object key")
    return {_serde(key, [*path, key]): _serde(value[key], [*path, key]) for key in value}


def sort_keys(value: Any) -> Any:
    """``value`` with every object's keys in code-point order, as a ``serde_json::Value``."""
    if isinstance(value, dict):
        return {key: sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sort_keys(item) for item in value]
    return value


def wire_json(data: Any, *, indent: int | None = None) -> str:
    """``serde_json::to_string`` (``indent=2``: ``to_string_pretty``) of ``data``, keys in the
    order given: structs in declaration order, maps already sorted (``sort_keys``)."""
    option = orjson.OPT_INDENT_2 if indent else 0
    try:
        return orjson.dumps(data, option=option).decode()
    except orjson.JSONEncodeError:
        return orjson.dumps(_serde(data, []), option=option).decode()


def _immutable(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(f"{type(self).__name__} is immutable; build a new value instead")


class FrozenDict(dict[str, Any]):
    """A JSON object that cannot change: to orjson, pydantic and jsonschema-rs a ``dict``."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = _immutable
    clear = pop = popitem = setdefault = update = _immutable

    def __reduce__(self) -> tuple[type[FrozenDict], tuple[dict[str, Any]]]:
        return (FrozenDict, (dict(self),))


class FrozenList(list[Any]):
    """A JSON array that cannot change."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _immutable
    append = clear = extend = insert = pop = remove = reverse = sort = _immutable

    def __reduce__(self) -> tuple[type[FrozenList], tuple[list[Any]]]:
        return (FrozenList, (list(self),))


def freeze(value: Any) -> Any:
    """A deep, frozen copy of a JSON value (frozen parts are shared, not copied)."""
    if isinstance(value, (FrozenDict, FrozenList)):
        return value
    if isinstance(value, dict):
        return FrozenDict({key: freeze(item) for key, item in value.items()})
    if isinstance(value, list):
        return FrozenList(freeze(item) for item in value)
    return value


def thaw(value: Any) -> Any:
    """A deep copy in plain ``dict``/``list`` (for libraries that want exact types)."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value
