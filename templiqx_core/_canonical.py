"""JSON values as the reference's serde_json writes them: canonical bytes (orjson with sorted
keys; what it refuses, integers beyond 64 bits or nesting past 255, takes an iterative slow
path), fingerprints, wire text, and frozen containers (so a cached fingerprint holds)."""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final, NoReturn

import orjson

from ._errors import InvalidData

_OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)  # subclasses of str/int/dict/list (frozen containers) encode like their base: fast path
MAX_DEPTH: Final = 512
"""Containers nested deeper than this are not canonical JSON (the reference's own parser
stops at 128; orjson encodes up to 255 and the slow path takes over from there)."""
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
    except orjson.JSONEncodeError:  # the slow path encodes it or names what is wrong
        return _encode(value).encode("utf-8")
    if b"null" in data:  # orjson writes NaN and Infinity as null: rule them out
        try:  # the standard library refuses them, at C speed
            json.dumps(value, allow_nan=False)
        except ValueError:
            _encode(value)  # finds the first one and names it
    return data


def fingerprint(value: Any) -> str:
    """SHA-256 hex digest of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def fingerprint_bytes(data: bytes) -> str:
    """SHA-256 hex digest of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def json_pointer(segments: Iterable[object]) -> str:
    """RFC 6901 pointer of ``segments``; a lone surrogate shows escaped (messages must print)."""
    text = "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in segments)
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


def _scalar(value: Any, path: Sequence[str]) -> str:
    try:  # orjson writes scalars as serde_json does (the fast path relies on it too)
        return orjson.dumps(value).decode()
    except orjson.JSONEncodeError:
        raise NotJson("a string with a lone surrogate", json_pointer(path)) from None


def _encode(value: Any) -> str:
    """The slow path: iterative, so depth is bounded by ``MAX_DEPTH``, not the stack."""
    out: list[str] = []
    stack: list[tuple[Iterator[tuple[str, Any]], str]] = []  # open containers' rest, closer
    path: list[str] = []  # the segment being written in each open container

    def put(item: Any) -> None:
        if isinstance(item, float):
            if not math.isfinite(item):
                raise NotJson(f"a non-finite number ({item})", json_pointer(path))
            item = float(item)  # orjson refuses float subclasses (numpy.float64)
        if isinstance(item, int) and not _I64_MIN <= item <= _U64_MAX:  # serde's nearest f64
            if abs(item) >= _F64_LIMIT:
                raise NotJson("an integer beyond the f64 range", json_pointer(path))
            item = float(item)
        if item is None or isinstance(item, (str, int, float)):
            out.append(_scalar(item, path))
        elif isinstance(item, Mapping) or (
            isinstance(item, Sequence) and not isinstance(item, (bytes, bytearray))
        ):
            if len(stack) >= MAX_DEPTH:
                raise NotJson(f"nested deeper than {MAX_DEPTH} levels", json_pointer(path))
            if isinstance(item, Mapping):
                keys = list(item)
                for key in keys:
                    if not isinstance(key, str):
                        reason = f"{type(key).__name__}, not a string"
                        raise NotJson(reason, json_pointer(path), what="object key")
                out.append("{")
                stack.append((((key, item[key]) for key in sorted(keys)), "}"))
            else:
                out.append("[")
                stack.append((((str(i), v) for i, v in enumerate(item)), "]"))
            path.append("")
        else:
            raise NotJson(f"{type(item).__name__}, not a JSON value", json_pointer(path))

    put(value)
    while stack:
        items, closer = stack[-1]
        entry = next(items, None)
        if entry is None:
            out.append(closer)
            stack.pop()
            path.pop()
            continue
        if out[-1] not in ("[", "{"):  # not the container's first entry
            out.append(",")
        path[-1] = entry[0]
        if closer == "}":
            out += (_scalar(entry[0], path), ":")
        put(entry[1])
    return "".join(out)


def sort_keys(value: Any) -> Any:
    """``value`` with every object's keys in code-point order, as a ``serde_json::Value``."""
    if isinstance(value, dict):
        return {key: sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sort_keys(item) for item in value]
    return value


def _as_serde_numbers(value: Any) -> Any:
    # serde_json (without arbitrary_precision) holds integers beyond i64/u64 as f64.
    if isinstance(value, int) and not isinstance(value, bool):
        return value if _I64_MIN <= value <= _U64_MAX else float(value)
    if isinstance(value, dict):
        return {key: _as_serde_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_serde_numbers(item) for item in value]
    return value


def wire_json(data: Any, *, indent: int | None = None) -> str:
    """``serde_json::to_string`` (``indent=2``: ``to_string_pretty``) of ``data``, keys in the
    order given: structs in declaration order, maps already sorted (``sort_keys``)."""
    option = orjson.OPT_INDENT_2 if indent else 0
    try:
        return orjson.dumps(data, option=option).decode()
    except orjson.JSONEncodeError:
        return orjson.dumps(_as_serde_numbers(data), option=option).decode()


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


def is_frozen(value: Any) -> bool:
    """Whether ``value`` cannot change (a scalar, or a frozen container)."""
    return isinstance(value, (FrozenDict, FrozenList, str, int, float, bool, type(None)))


def thaw(value: Any) -> Any:
    """A deep copy in plain ``dict``/``list`` (for libraries that want exact types)."""
    if isinstance(value, dict):
        return {key: thaw(item) for key, item in value.items()}
    if isinstance(value, list):
        return [thaw(item) for item in value]
    return value
