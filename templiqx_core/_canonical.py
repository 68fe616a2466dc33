"""Canonical JSON and SHA-256 fingerprints, byte-compatible with the Rust reference.

The reference writes a ``serde_json::Value`` whose object keys are sorted. orjson with
``OPT_SORT_KEYS`` produces exactly those bytes (same escaping, same shortest-round-trip
float layout, keys ordered by code point) and is an order of magnitude faster than the
stdlib, so it is the fast path. Two inputs fall outside orjson and take the slow path,
a small hand-written encoder: integers beyond the 64-bit range (the reference turns them
into the nearest f64) and nesting deeper than orjson's recursion limit.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from ._errors import InvalidData

__all__ = ["canonical_json", "fingerprint", "fingerprint_bytes"]

_OPTIONS = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
_I64_MIN = -(2**63)
_U64_MAX = 2**64 - 1


def _reject(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> bytes:
    """Return the canonical UTF-8 JSON bytes of a JSON value (dict/list/str/int/float/bool/None)."""
    try:
        return orjson.dumps(value, default=_reject, option=_OPTIONS)
    except orjson.JSONEncodeError:
        # Big integers, deep nesting, str subclasses or a non-JSON value: the slow
        # path either encodes it exactly like the reference or names what is wrong.
        parts: list[str] = []
        _encode(value, parts, ())
        return "".join(parts).encode("utf-8")


def fingerprint(value: Any) -> str:
    """SHA-256 hex digest of ``canonical_json(value)``."""
    return hashlib.sha256(canonical_json(value)).hexdigest()


def fingerprint_bytes(data: bytes) -> str:
    """SHA-256 hex digest of raw bytes."""
    return hashlib.sha256(data).hexdigest()


_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n"}
_SHORT_ESCAPES.update({"\f": "\\f", "\r": "\\r"})


def _encode_str(text: str) -> str:
    out = ['"']
    for ch in text:
        if ch in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[ch])
        elif ch < "\x20":
            out.append(f"\\u{ord(ch):04x}")
        else:
            out.append(ch)
    out.append('"')
    return "".join(out)


def format_float(number: float) -> str:
    """Lay out a float as serde_json (zmij) does; non-finite values become ``null``."""
    if not math.isfinite(number):
        return "null"
    digits_repr = repr(number)
    sign = "-" if digits_repr.startswith("-") else ""
    mantissa, _, exp_text = digits_repr.lstrip("-").partition("e")
    int_part, _, frac_part = mantissa.partition(".")
    exp = int(exp_text) if exp_text else 0
    digits = (int_part + frac_part).lstrip("0")
    if not digits:  # zero
        return f"{sign}0.0"
    # Decimal exponent of the first significant digit.
    leading_zeros = len(int_part + frac_part) - len((int_part + frac_part).lstrip("0"))
    point = len(int_part) + exp - leading_zeros  # digits before the decimal point
    digits = digits.rstrip("0")
    e = point - 1
    if -5 <= e <= 15:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    body = digits[0] if len(digits) == 1 else f"{digits[0]}.{digits[1:]}"
    return f"{sign}{body}e{'+' if e >= 0 else '-'}{abs(e)}"


def _encode(value: Any, out: list[str], path: tuple[str, ...]) -> None:
    # Iterative encoding would avoid Python's recursion limit too, but documents
    # nested deeper than ~1000 levels are not plausible contract data.
    if value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        if _I64_MIN <= value <= _U64_MAX:
            out.append(str(int(value)))
        else:
            out.append(format_float(float(value)))
    elif isinstance(value, float):
        out.append(format_float(value))
    elif isinstance(value, str):
        out.append(_encode_str(value))
    elif isinstance(value, Mapping):
        out.append("{")
        items = []
        for key in value:
            if not isinstance(key, str):
                raise InvalidData(
                    f"canonical JSON: object key at /{'/'.join(path)} is "
                    f"{type(key).__name__}, not a string"
                )
            items.append(key)
        for index, key in enumerate(sorted(items)):
            if index:
                out.append(",")
            out.append(_encode_str(key))
            out.append(":")
            _encode(value[key], out, (*path, key))
        out.append("}")
    elif isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            _encode(item, out, (*path, str(index)))
        out.append("]")
    else:
        raise InvalidData(
            f"canonical JSON: value at /{'/'.join(path)} is {type(value).__name__}, "
            "not a JSON value"
        )
