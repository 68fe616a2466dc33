"""Accepting a contract document without pydantic: the fast path of loading.

``checked_contract`` says yes only when pydantic's ``Contract`` would accept the same
document unchanged: plain JSON data (exact ``dict``/``list``/``str``/``int``/``float``/
``bool``/``None``, string keys, UTF-8-encodable strings, finite floats, 64-bit integers,
nesting within ``MAX_DEPTH``), no float where the model wants a strict ``int``, and valid
against ``contract.schema.json`` — the model's own JSON Schema
(``Contract.model_json_schema(by_alias=True)``, regenerated and compared by a test). On
anything else it says "ask the model" (``None``), and callers validate with pydantic,
which yields the exact diagnostics. Saying "no" too often only costs time; saying "yes"
wrongly is what the equivalence tests rule out.
"""

from __future__ import annotations

import functools
import math
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Any, Final, TypeVar

import jsonschema_rs
import orjson

from .._loading import compose_and_load

__all__ = [
    "CONTRACT_SCHEMA_PATH",
    "MAX_DEPTH",
    "SCHEMA_FILE",
    "checked_contract",
    "is_plain_json",
    "memoized",
    "read_checked_contract",
    "read_contract_text",
    "reading_each_file_once",
]

SCHEMA_FILE: Final = Path(__file__).with_name("contract.schema.json")
CONTRACT_SCHEMA_PATH: Final = SCHEMA_FILE
"""The contract format as a JSON Schema, shipped in the package (editors validate with it)."""
MAX_DEPTH: Final = 64
"""Deeper documents go to pydantic, whose recursion limit (about 250 levels) JSON Schema
validation does not share."""
# The model's strict ``int`` fields (FilterCall.decimals, TokensCheck.max_tokens): JSON
# Schema's "integer" also admits 5.0, pydantic's strict int does not. A test pins this
# set to the schema's.
INTEGER_KEYS: Final = frozenset({"decimals", "max_tokens"})
_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1

T = TypeVar("T")

_READS: ContextVar[dict[tuple[str, str], Any] | None] = ContextVar(
    "templiqx_contract_reads", default=None
)


@contextmanager
def reading_each_file_once() -> Iterator[None]:
    """Within the block, contract files are read and parsed once per path (a CLI run).

    Scoped to the block (a context variable), so no host ever sees a stale contract.
    """
    token = _READS.set({})
    try:
        yield
    finally:
        _READS.reset(token)


def memoized(kind: str, path: str | os.PathLike[str], read: Callable[[], T]) -> T:
    """``read()``, or its earlier result for the same ``kind`` and path in this block."""
    memo = _READS.get()
    if memo is None:
        return read()
    key = (kind, os.fspath(path))
    if key not in memo:
        memo[key] = read()
    result: T = memo[key]
    return result


def _utf8(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate
        return False
    return True


def is_plain_json(value: Any, *, max_depth: int = MAX_DEPTH) -> bool:
    """Whether ``value`` is JSON as the models take it, with no strict-int field a float."""
    pending: list[tuple[Any, int]] = [(value, 0)]
    while pending:
        item, depth = pending.pop()
        kind = type(item)
        if kind is str:
            if not _utf8(item):
                return False
        elif kind is dict:
            if depth >= max_depth:
                return False
            for key, child in item.items():
                if type(key) is not str or not _utf8(key):
                    return False
                if key in INTEGER_KEYS and type(child) is float:
                    return False
                pending.append((child, depth + 1))
        elif kind is list:
            if depth >= max_depth:
                return False
            pending.extend((child, depth + 1) for child in item)
        elif kind is int:
            if not _I64_MIN <= item <= _I64_MAX:
                return False
        elif kind is float:
            if not math.isfinite(item):
                return False
        elif item is not None and kind is not bool:
            return False
    return True


@functools.cache
def _validator() -> Any:
    schema = orjson.loads(SCHEMA_FILE.read_bytes())
    return jsonschema_rs.Draft202012Validator(schema)


def checked_contract(data: Any) -> dict[str, Any] | None:
    """``data`` if the ``Contract`` model certainly accepts it as is, else ``None``."""
    if type(data) is not dict or not is_plain_json(data):
        return None
    if not _validator().is_valid(data):
        return None
    return data


def read_contract_text(path: str | Path) -> str:
    """The file's text (UTF-8), read once per path within ``reading_each_file_once``."""
    return memoized("text", path, lambda: Path(path).read_text(encoding="utf-8"))


def _read(path: str | Path) -> dict[str, Any] | None:
    try:
        _, data = compose_and_load(read_contract_text(path))
    except Exception:  # the model path reads it again and reports (or raises) the error
        return None
    return checked_contract(data)


def read_checked_contract(path: str | Path) -> dict[str, Any] | None:
    """The contract file's document if it passes ``checked_contract``, else ``None``."""
    return memoized("checked", path, lambda: _read(path))
