"""Eval cases and pure functions judging an execution by them, so the runner, the tests and a
host's own harness agree on what passed."""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from pydantic import Field, JsonValue

from ._checks import (
    Check,
    ContainsCheck,
    EqualsCheck,
    LatencyCheck,
    MatchesCheck,
    PointerCheck,
    RangeCheck,
    SchemaValidCheck,
    TokensCheck,
    TypeCheck,
)
from ._compiler.model import EvalCase
from ._errors import InvalidData

#: A JSONL case line, in characters: read up to it, so no line is ever held whole.
MAX_CASE_LINE: Final = 16 * 2**20


class EvalCaseSpec(EvalCase):
    """A contract's eval as a ``--cases`` file holds it: ``fake_output`` optional, ``metadata``."""

    _omit_none = frozenset({"expected_output", "fake_output"})

    fake_output: JsonValue = None
    metadata: dict[str, JsonValue] = Field(default_factory=dict)


@dataclass(frozen=True)
class Observed:
    """What one execution produced, as the checks see it."""

    output: Any
    schema_valid: bool
    latency_ms: float
    total_tokens: int | None = None


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str = ""


_MISSING = object()


def resolve_pointer(document: Any, pointer: str) -> Any:
    """The value at an RFC 6901 pointer, or ``_MISSING`` when there is none."""
    current = document
    for raw in pointer.split("/")[1:]:
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(current, dict) and part in current:
            current = current[part]
        elif (  # RFC 6901 indexes; int() refuses past 4300 digits, and no list is that long
            isinstance(current, list)
            and re.fullmatch("0|[1-9][0-9]{0,18}", part)
            and int(part) < len(current)
        ):
            current = current[int(part)]
        else:
            return _MISSING
    return current


# In this order: a bool is an int. Subclasses count (a host's output may hold enums).
_JSON_TYPES: Final = {type(None): "null", bool: "boolean", int: "integer", str: "string"}


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _contains(haystack: Any, needle: Any) -> bool:
    if isinstance(haystack, str):
        return isinstance(needle, str) and needle in haystack
    if isinstance(haystack, list):
        return any(_same(item, needle) for item in haystack)
    if isinstance(haystack, dict):
        if isinstance(needle, dict):
            return all(k in haystack and _same(haystack[k], v) for k, v in needle.items())
        return isinstance(needle, str) and needle in haystack
    return False


def _same(left: Any, right: Any) -> bool:
    """JSON equality: 1 == 1.0, but true is not 1."""
    if _is_number(left) and _is_number(right):
        return bool(left == right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_same(left[k], right[k]) for k in left)
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_same, left, right))
    return type(left) is type(right) and bool(left == right)


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def _pointer_check(check: PointerCheck, output: Any) -> CheckResult:
    where = check.pointer or "/"
    value = resolve_pointer(output, check.pointer)
    found = value is not _MISSING
    match check:
        case EqualsCheck(equals=wanted):
            kind, expected, passed = "equals", _short(wanted), found and _same(value, wanted)
        case ContainsCheck(contains=wanted):
            kind, expected, passed = "contains", _short(wanted), found and _contains(value, wanted)
        case MatchesCheck(matches=pattern):
            kind, expected = "matches", _short(pattern)
            passed = isinstance(value, str) and re.search(pattern, value) is not None
        case RangeCheck(min=low, max=high):
            low, high = -math.inf if low is None else low, math.inf if high is None else high
            kind, expected = "range", f"[{low:g}, {high:g}]"
            passed = _is_number(value) and low <= value <= high
        case TypeCheck(type=expected):
            types = (name for cls, name in _JSON_TYPES.items() if isinstance(value, cls))
            actual = next(types, "array" if isinstance(value, list) else "object")
            if isinstance(value, float):
                actual = "integer" if value.is_integer() else "number"
            kind = "type"
            passed = found and (actual == expected or (expected, actual) == ("number", "integer"))
    name = check.name or f"{where} {kind}"
    if passed:
        return CheckResult(name, True)
    got = "missing" if value is _MISSING else _short(value)
    return CheckResult(name, False, f"{where}: expected {kind} {expected}, got {got}")


def _one(check: Check, observed: Observed) -> CheckResult:
    match check:
        case SchemaValidCheck():
            default, passed = "schema_valid", observed.schema_valid == check.schema_valid
            detail = f"output_schema_valid is {str(observed.schema_valid).lower()}"
        case LatencyCheck():
            default, passed = "latency", observed.latency_ms <= check.max_latency_ms
            detail = f"{observed.latency_ms:.0f} ms > {check.max_latency_ms:g} ms"
        case TokensCheck(max_tokens=most):
            default, tokens = "tokens", observed.total_tokens
            passed = tokens is not None and tokens <= most
            detail = "no token usage reported" if tokens is None else f"{tokens} tokens > {most}"
        case _:
            return _pointer_check(check, observed.output)
    return CheckResult(check.name or default, passed, "" if passed else detail)


def check_case(
    checks: Sequence[Check], expected_output: Any, observed: Observed
) -> list[CheckResult]:
    """``expected_output`` (exact, if given), schema validity (unless a check says), each check."""
    results = []
    if expected_output is not None:
        passed = _same(observed.output, expected_output)
        detail = "" if passed else f"got {_short(observed.output)}"
        results.append(CheckResult("expected_output", passed, detail))
    if not any(isinstance(check, SchemaValidCheck) for check in checks):
        results.append(_one(SchemaValidCheck(schema_valid=True), observed))
    results.extend(_one(check, observed) for check in checks)
    return results


def iter_cases(path: Path) -> Iterator[EvalCaseSpec]:
    """The cases of a JSONL or YAML file, a case at a time."""
    import orjson

    from ._loading import compose_and_load, validate_model

    try:
        if path.suffix == ".jsonl":  # read a line at a time; a leading BOM, as YAML's
            with path.open(encoding="utf-8-sig") as file:
                lines = iter(functools.partial(file.readline, MAX_CASE_LINE + 1), "")
                for number, line in enumerate(lines, 1):
                    where = f"{path}:{number}"
                    if len(line) > MAX_CASE_LINE:
                        raise InvalidData(f"{where}: longer than {MAX_CASE_LINE} characters")
                    if line.strip():
                        try:
                            data = orjson.loads(line)
                        except orjson.JSONDecodeError:
                            raise InvalidData(f"{where}: not a JSON object") from None
                        yield validate_model(EvalCaseSpec, data, name=where)
            return
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidData(f"{path}: cannot read ({type(error).__name__})") from None
    try:
        document = compose_and_load(text)[1]
    except Exception as error:  # YAML errors of every kind: one typed error
        raise InvalidData(f"{path}: not YAML ({type(error).__name__})") from None
    if not isinstance(document, list):
        raise InvalidData(f"{path}: expected a list of cases")
    for index, data in enumerate(document):
        yield validate_model(EvalCaseSpec, data, name=f"{path} case {index}")
