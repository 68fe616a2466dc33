"""Content written as a string, ``{{ PATH | filter | filter(name=JSON) }}`` (``{{ "..." }}``
is literal text): sugar for exactly the ``text``/``interpolate`` nodes the long form spells
out. Hand-written: a template engine would bring its own grammar and semantics."""

from __future__ import annotations

import json
import re
from typing import Annotated, Any, Final, Literal, Union, get_args

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    JsonValue,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .._canonical import NotJson, canonical_json
from .._contracts import WireModel

FilterName = Literal["trim", "lower", "upper", "json", "format_date", "format_number", "default"]


def _json_only(value: Any) -> Any:
    try:  # a lone surrogate (wire models refuse .inf and .nan themselves)
        canonical_json(value)
    except NotJson as error:
        raise PydanticCustomError(
            "not_json", "not JSON: {reason}", {"reason": error.reason}
        ) from None
    return value


JsonLiteral = Annotated[JsonValue, AfterValidator(_json_only)]
"""A JSON value written in a contract: one canonical JSON can hold."""

_ARGUMENT: Final = {"format_date": "format", "format_number": "decimals", "default": "value"}


class FilterCall(WireModel):
    """``format_date`` takes ``format`` (strftime), ``format_number`` takes ``decimals``,
    ``default`` the ``value`` standing for an absent or null one; no filter another's."""

    _omit_unset = frozenset({"value"})  # ``value=null`` stands for null

    model_config = ConfigDict(
        **WireModel.model_config,
        json_schema_extra={
            "allOf": [  # the argument of each filter that takes one, null or left out elsewhere
                {
                    "if": {"properties": {"name": {"const": name}}},
                    "else": {"not": {"required": ["value"]}}
                    if argument == "value"
                    else {"properties": {argument: {"type": "null"}}},
                }
                for name, argument in _ARGUMENT.items()
            ]
        },
    )

    name: FilterName
    format: str | None = None
    decimals: int | None = Field(default=None, ge=0, le=20)
    value: JsonLiteral = ""

    @model_validator(mode="after")
    def _own_arguments(self) -> FilterCall:
        takes = _ARGUMENT.get(self.name, "no argument")
        for argument in sorted(self.model_fields_set - {"name", takes}):
            if argument == "value" or getattr(self, argument) is not None:  # null is only a value
                context = {"name": self.name, "takes": takes, "argument": argument}
                raise PydanticCustomError(
                    "filter_argument", "{name} takes {takes}, not {argument}", context
                )
        return self


Filter = Union[FilterName, FilterCall]

_PATH: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.(?:[A-Za-z_][A-Za-z0-9_]*|[0-9]+))*")
_NAME: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SPACE: Final = re.compile(r"\s*")
_DECODER: Final = json.JSONDecoder()


class TemplateSyntaxError(ValueError):
    def __init__(self, message: str, offset: int) -> None:  # from the string's start
        super().__init__(f"{message} at character {offset}")


class _Scanner:  # one placeholder's inside; errors at the character that broke it
    def __init__(self, text: str, at: int) -> None:
        self.text, self.at = text, at

    def skip(self) -> None:
        self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]

    def take(self, literal: str) -> bool:
        self.skip()
        if self.text.startswith(literal, self.at):
            self.at += len(literal)
            return True
        return False

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        self.skip()
        found = pattern.match(self.text, self.at)
        if found is None:
            raise TemplateSyntaxError(f"expected {what}", self.at)
        self.at = found.end()
        return found.group()

    def json(self) -> Any:
        self.skip()
        try:
            value, end = _DECODER.raw_decode(self.text, self.at)
        except (ValueError, RecursionError):  # not JSON, too many digits, too deep
            raise TemplateSyntaxError("expected a JSON literal", self.at) from None
        try:  # decoded, but no JSON value: NaN, 1e400 (inf), "\ud800" (a lone surrogate)
            canonical_json(value)
        except NotJson as error:
            reason = f"expected a JSON literal, not {error.reason}"
            raise TemplateSyntaxError(reason, self.at) from None
        self.at = end
        return value

    def filter(self) -> str | dict[str, Any]:
        self.skip()
        start = self.at
        name = self.match(_NAME, "a filter name")
        if name not in get_args(FilterName):
            known = ", ".join(get_args(FilterName))
            raise TemplateSyntaxError(f"unknown filter {name!r} (filters: {known})", start)
        if not self.take("("):
            return name
        call: dict[str, Any] = {"name": name}
        while not self.take(")"):
            if len(call) > 1 and not self.take(","):
                raise TemplateSyntaxError("expected ',' or ')'", self.at)
            argument = self.match(_NAME, "an argument name")
            if argument in call:
                raise TemplateSyntaxError(f"argument {argument!r} given twice", self.at)
            if not self.take("="):
                raise TemplateSyntaxError("expected '='", self.at)
            call[argument] = self.json()
        try:
            FilterCall.model_validate(call)
        except ValidationError as error:
            first = error.errors(include_url=False, include_input=False)[0]
            where = ".".join(str(part) for part in first["loc"])
            rule = f"{name}: {where}: {first['msg']}" if where else first["msg"]  # else its own
            raise TemplateSyntaxError(f"filter {rule}", start) from None
        return call


def parse_template(text: str) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    literal: list[str] = []
    at = 0
    while (start := text.find("{{", at)) >= 0:
        literal.append(text[at:start])
        scanner = _Scanner(text, start + 2)
        escape = scanner.take('"')
        if escape:  # a JSON string: literal text
            scanner.at -= 1
            literal.append(scanner.json())
        else:
            path = scanner.match(_PATH, "a reference path (name, then .name or .digits)")
            filters = []
            while scanner.take("|"):
                filters.append(scanner.filter())
        if not scanner.take("}}"):
            if text.find("}}", scanner.at) < 0:
                raise TemplateSyntaxError("unclosed placeholder '{{'", start)
            raise TemplateSyntaxError("malformed placeholder: expected '}}'", scanner.at)
        if not escape:
            if run := "".join(literal):
                nodes.append({"kind": "text", "value": run})
            literal = []
            expression = {"kind": "ref", "path": path}
            nodes.append({"kind": "interpolate", "expression": expression, "filters": filters})
        at = scanner.at
    if run := "".join([*literal, text[at:]]):
        nodes.append({"kind": "text", "value": run})
    return nodes
