"""Canonical JSON and SHA-256 fingerprints, byte-compatible with the Rust reference.

The reference writes a ``serde_json::Value`` whose object keys are sorted. orjson with
``OPT_SORT_KEYS`` produces exactly those bytes (same escaping, same shortest-round-trip
float layout, keys ordered by code point), so it is the fast path. What orjson refuses
takes an iterative slow path (no input can exhaust the stack): integers beyond 64 bits
(the reference turns them into the nearest f64) and nesting deeper than 255.

What is not JSON is ``InvalidData`` naming the JSON pointer of the offending value, never a
raw Python error: NaN/Infinity (orjson would write ``null``), a string with a lone
surrogate, a non-string object key, any other type, nesting deeper than ``MAX_DEPTH``.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import orjson

from ._errors import InvalidData

_OPTIONS = (
    orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_DATACLASS
)  # subclasses of str/int/dict/list (frozen containers) encode like their base: fast path
MAX_DEPTH: Final = 512
"""Containers nested deeper than this are not canonical JSON (the reference's own parser
stops at 128; orjson encodes up to 255 and the slow path takes over from there)."""
_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1
_F64_LIMIT = 2**1024  # float() of anything this large overflows


class NotJson(InvalidData):
    """A value that has no canonical JSON form; ``pointer`` says where, ``reason`` what."""

    def __init__(self, reason: str, pointer: str, *, what: str = "value") -> None:
        super().__init__(f"canonical JSON: {what} at {pointer or '/'} is {reason}")
        self.reason = reason
        self.pointer = pointer


def _reject(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Return the canonical UTF-8 JSON bytes of a JSON value (dict/list/str/int/float/bool/None).

    Raises ``NotJson`` (an ``InvalidData``) naming the JSON pointer of a value that is not JSON.
    """
    try:
        data = orjson.dumps(value, default=_reject, option=_OPTIONS)
    except orjson.JSONEncodeError:
        # Big integers, deep nesting, str subclasses or a non-JSON value: the slow
        # path either encodes it exactly like the reference or names what is wrong.
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
    """RFC 6901 pointer of ``segments`` (``""`` for none)."""
    return "".join("/" + str(s).replace("~", "~0").replace("/", "~1") for s in segments)


def _pointer(segments: Sequence[str]) -> str:
    """``json_pointer``; a lone surrogate in a key is shown escaped (messages must print)."""
    text = json_pointer(segments)
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode()


def _encode_str(text: str, segments: Sequence[str]) -> str:
    try:  # orjson escapes strings as serde_json does (the fast path relies on it too)
        return orjson.dumps(text).decode()
    except orjson.JSONEncodeError:
        raise NotJson("a string with a lone surrogate", _pointer(segments)) from None


def format_float(number: float) -> str:
    """Lay out a float as serde_json does (orjson's layout is the same; the fast path
    writes floats with it); non-finite values become ``null``."""
    return orjson.dumps(float(number)).decode()


def _encode(value: Any) -> str:
    """The slow path: iterative, so depth is bounded by ``MAX_DEPTH``, not the stack."""
    out: list[str] = []
    stack: list[tuple[Iterator[tuple[str, Any]], str]] = []  # open containers' rest, closer
    path: list[str] = []  # the segment being written in each open container

    def put(item: Any) -> None:
        if item is None:
            out.append("null")
        elif item is True:
            out.append("true")
        elif item is False:
            out.append("false")
        elif isinstance(item, int):
            if _I64_MIN <= item <= _U64_MAX:
                out.append(str(int(item)))
            elif abs(item) < _F64_LIMIT:
                out.append(format_float(float(item)))
            else:
                raise NotJson("an integer beyond the f64 range", _pointer(path))
        elif isinstance(item, float):
            if not math.isfinite(item):
                raise NotJson(f"a non-finite number ({item})", _pointer(path))
            out.append(format_float(item))
        elif isinstance(item, str):
            out.append(_encode_str(item, path))
        elif isinstance(item, Mapping) or (
            isinstance(item, Sequence) and not isinstance(item, (bytes, bytearray))
        ):
            if len(stack) >= MAX_DEPTH:
                raise NotJson(f"nested deeper than {MAX_DEPTH} levels", _pointer(path))
            if isinstance(item, Mapping):
                keys = list(item)
                for key in keys:
                    if not isinstance(key, str):
                        reason = f"{type(key).__name__}, not a string"
                        raise NotJson(reason, _pointer(path), what="object key")
                out.append("{")
                stack.append((((key, item[key]) for key in sorted(keys)), "}"))
            else:
                out.append("[")
                stack.append((((str(i), v) for i, v in enumerate(item)), "]"))
            path.append("")
        else:
            raise NotJson(f"{type(item).__name__}, not a JSON value", _pointer(path))

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
            out += (_encode_str(entry[0], path), ":")
        put(entry[1])
    return "".join(out)
