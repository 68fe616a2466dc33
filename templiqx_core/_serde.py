"""serde_json's text for JSON values: how every wire model and the MCP server write JSON.

The reference writes structs in declaration order and every map sorted (``BTreeMap`` and
``serde_json::Value`` without ``preserve_order``); callers hand over data already in that
order (``sort_keys`` for maps) and ``wire_json`` writes it as ``serde_json::to_string`` or
``to_string_pretty`` would.
"""

from __future__ import annotations

from typing import Any, Final

import orjson

__all__ = ["sort_keys", "wire_json"]

_I64_MIN: Final = -(2**63)
_U64_MAX: Final = 2**64 - 1


def sort_keys(value: Any) -> Any:
    """``value`` with every object's keys in code-point order, as a ``serde_json::Value``."""
    if isinstance(value, dict):
        return {key: sort_keys(value[key]) for key in sorted(value)}
    if isinstance(value, list):
        return [sort_keys(item) for item in value]
    return value


def _as_serde_numbers(value: Any) -> Any:
    # serde_json (without arbitrary_precision) holds integers beyond i64/u64 as f64.
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and not _I64_MIN <= value <= _U64_MAX:
        return float(value)
    if isinstance(value, dict):
        return {key: _as_serde_numbers(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_as_serde_numbers(item) for item in value]
    return value


def wire_json(data: Any, *, indent: int | None = None) -> str:
    """JSON text of ``data`` as ``serde_json::to_string`` (``indent=2``: ``to_string_pretty``),
    keys in the order given."""
    option = orjson.OPT_INDENT_2 if indent else 0
    try:
        return orjson.dumps(data, option=option).decode()
    except orjson.JSONEncodeError:
        return orjson.dumps(_as_serde_numbers(data), option=option).decode()
