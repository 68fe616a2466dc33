"""The ``templiqx/v1alpha1`` contract as strict pydantic models (the one definition, whence
the shipped JSON Schema); content's string form, ``{{ PATH | filter(name=JSON) }}``, hand-written
(a template engine brings its own grammar); loading, with errors as located diagnostics."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Final, Literal, Union, get_args

import yaml
from pydantic import (
    AfterValidator,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    JsonValue,
    Tag,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from .. import codes
from .._canonical import NotJson, canonical_json, json_pointer
from .._checks import Check
from .._contracts import Diagnostic, Role, SourceSpan, WireModel
from .._errors import IoFailure, NotFound
from .._loading import compose_and_load, contract_source

FilterName = Literal["trim", "lower", "upper", "json", "format_date", "format_number", "default"]


def _json_only(value: Any) -> Any:
    try:  # a lone surrogate (wire models refuse .inf and .nan themselves)
        canonical_json(value)
    except NotJson as error:
        reason = {"reason": error.reason}
        raise PydanticCustomError("not_json", "not JSON: {reason}", reason) from None
    return value


JsonLiteral = Annotated[JsonValue, AfterValidator(_json_only)]  # one canonical JSON can hold

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
                names = {"takes": takes, "argument": argument}
                raise PydanticCustomError("filter_argument", "takes {takes}, not {argument}", names)
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

    def skip(self) -> int:
        self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]
        return self.at

    def take(self, literal: str) -> bool:
        found = self.text.startswith(literal, self.skip())
        self.at += len(literal) if found else 0
        return found

    def match(self, pattern: re.Pattern[str], what: str) -> str:
        found = pattern.match(self.text, self.skip())
        if found is None:
            raise TemplateSyntaxError(f"expected {what}", self.at)
        self.at = found.end()
        return found.group()

    def json(self) -> Any:
        try:
            value, end = _DECODER.raw_decode(self.text, self.skip())
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
        start = self.skip()
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
            rule = ": ".join([*map(str, first["loc"]), first["msg"]])  # the argument, if any
            raise TemplateSyntaxError(f"filter {name}: {rule}", start) from None
        return call


def parse_template(text: str) -> list[dict[str, Any]]:
    nodes: list[dict[str, Any]] = []
    literal: list[str] = []
    at = 0
    while (start := text.find("{{", at)) >= 0:
        literal.append(text[at:start])
        scanner = _Scanner(text, start + 2)
        escape = text.startswith('"', scanner.skip())
        if escape:  # a JSON string: literal text
            literal.append(scanner.json())
        else:
            path = scanner.match(_PATH, "a reference path (name, then .name or .digits)")
            filters = []
            while scanner.take("|"):
                filters.append(scanner.filter())
        if not scanner.take("}}"):
            message = "unclosed or malformed placeholder: expected '}}'"
            raise TemplateSyntaxError(message, scanner.at)
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


CONTRACT_SCHEMA_PATH: Final = Path(__file__).with_name("contract.schema.json")
"""The contract format as a JSON Schema, shipped for editors."""
#: A contract is a few KiB (Langfuse's at most 4 MiB): tens of MB of YAML took minutes and GBs.
MAX_CONTRACT_CHARS: Final = 4 * 2**20


class RefExpr(WireModel):
    kind: Literal["ref"]
    path: str = Field(min_length=1)


class LiteralExpr(WireModel):
    kind: Literal["literal"]
    value: JsonLiteral


class EqualsExpr(WireModel):
    kind: Literal["equals"]
    left: Expression
    right: Expression


class NotExpr(WireModel):
    kind: Literal["not"]
    value: Expression


class LogicalExpr(WireModel):
    kind: Literal["and", "or"]
    values: list[Expression]


class ExistsExpr(WireModel):
    """True when the declared ``path`` holds a value other than null (an optional one)."""

    kind: Literal["exists"]
    path: str = Field(min_length=1)


Expression = Annotated[
    RefExpr | LiteralExpr | EqualsExpr | NotExpr | LogicalExpr | ExistsExpr,
    Field(discriminator="kind"),
]


class TextNode(WireModel):
    kind: Literal["text"]
    value: str


class InterpolateNode(WireModel):
    kind: Literal["interpolate"]
    expression: Expression
    filters: list[Filter] = Field(default_factory=list)


def _expand(value: Any) -> Any:
    """A string form becomes the node list it stands for."""
    if isinstance(value, list) and any(isinstance(item, str) for item in value):
        message = "a string stands for a whole content; in a list, write nodes (kind: text, ...)"
        raise PydanticCustomError("template_in_list", message)
    if not isinstance(value, str):
        return value
    try:
        return parse_template(value)
    except TemplateSyntaxError as error:
        raise PydanticCustomError("template_syntax", "{reason}", {"reason": str(error)}) from None


_Placeholders = Annotated[str, Field(description="{{ path | filter }} placeholders")]
Content = Annotated[
    list["ContentNode"],
    BeforeValidator(_expand, json_schema_input_type=_Placeholders | list["ContentNode"]),
]
"""Content nodes, or a string with ``{{ ... }}`` placeholders standing for them."""


class WhenNode(WireModel):
    kind: Literal["when"]
    condition: Expression
    then: Content
    otherwise: Content = Field(default_factory=list, alias="else")


class ForEachNode(WireModel):
    kind: Literal["for_each"]
    collection: Expression
    item: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    body: Content
    separator: str = ""


class ComponentNode(WireModel):
    kind: Literal["component"]
    name: str = Field(min_length=1)
    with_: dict[str, Expression] = Field(default_factory=dict, alias="with")


ContentNode = Annotated[
    TextNode | InterpolateNode | WhenNode | ForEachNode | ComponentNode, Field(discriminator="kind")
]


class FieldSpec(WireModel):
    schema_: dict[str, Any] = Field(alias="schema")
    required: bool = False
    description: str | None = None


class TypedComponent(WireModel):
    """A component with declared, schema-typed parameters (checked at every use)."""

    parameters: dict[str, FieldSpec] = Field(default_factory=dict)
    content: Content


# Legacy components are a bare list of nodes (or its string form) whose arguments are
# not declared; told apart by shape, so a bad template is one error, not one per member.
ComponentDefinition = Annotated[
    Union[Annotated[TypedComponent, Tag("Typed")], Annotated[Content, Tag("Nodes")]],
    Discriminator(lambda v: "Typed" if isinstance(v, (dict, TypedComponent)) else "Nodes"),
]


class MessageSpec(WireModel):
    role: Role
    content: Content


class ExtensionSpec(WireModel):
    capability: str = Field(min_length=1)
    schema_: dict[str, Any] = Field(alias="schema")
    value: JsonValue


class EvalCase(WireModel):
    """A fixture (``fake_output``, the scripted runtime's answer) and what a model's answer
    must satisfy (``expected_output``, ``assert``)."""

    _omit_none = frozenset({"expected_output"})
    _omit_empty = frozenset({"assert_", "assert"})  # by name, or by alias

    id: str = Field(min_length=1)
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    context: dict[str, JsonValue] = Field(default_factory=dict)
    fake_output: JsonValue
    expected_output: JsonValue = None
    assert_: list[Check] = Field(default_factory=list, alias="assert")


class Contract(WireModel):
    """A parsed prompt contract: messages, declared values, output schema and evals."""

    api_version: Literal["templiqx/v1alpha1"]
    id: str = Field(min_length=1)
    version: str = Field(min_length=1)
    description: str | None = None
    inputs: dict[str, FieldSpec] = Field(default_factory=dict)
    context: dict[str, FieldSpec] = Field(default_factory=dict)
    capabilities: list[str] = Field(default_factory=list)
    messages: list[MessageSpec] = Field(min_length=1)
    output_schema: dict[str, Any]
    runtime_policy: dict[str, JsonValue] = Field(default_factory=dict)
    extensions: dict[str, ExtensionSpec] = Field(default_factory=dict)
    components: dict[str, ComponentDefinition] = Field(default_factory=dict)
    provenance: dict[str, JsonValue] = Field(default_factory=dict)
    evals: list[EvalCase] = Field(default_factory=list)

    @property
    def declared_capabilities(self) -> list[str]:
        """Its capabilities and its extensions' (the default targets)."""
        return self.capabilities + [ext.capability for ext in self.extensions.values()]


def _error(message: str, file: str | None, mark: yaml.Mark | None = None, **at: Any) -> Diagnostic:
    at.setdefault("code", codes.PARSE_YAML)
    if mark is not None:
        line, column = mark.line + 1, mark.column + 1
        at["span"] = SourceSpan(line=line, column=column, end_line=line, end_column=column)
    return Diagnostic(severity="error", message=message, file=file, **at)


def _locate(data: Any, root: yaml.Node, loc: Sequence[Any]) -> tuple[list[Any], yaml.Mark]:
    """pydantic's error location without its union tags, and the deepest node's YAML mark."""
    cleaned: list[Any] = []
    node, mark = root, root.start_mark
    for index, part in enumerate(loc):
        in_list = isinstance(data, list) and isinstance(part, int) and 0 <= part < len(data)
        tag = "[" in str(part) or str(part)[:1].isupper() or part in ("str", "int", "float", "bool")
        if in_list or (isinstance(data, dict) and part in data):
            node = node.value[part] if in_list else node.value[list(data).index(part)][1]
            data, mark = data[part], node.start_mark
        elif index < len(loc) - 1 or tag:  # a union tag (JsonValue's for a scalar: str, int...)
            continue
        cleaned.append(part)
    return cleaned, mark


def parse_contract(
    text: str, *, file: str | None = None
) -> tuple[Contract | None, list[Diagnostic]]:
    """Parse contract YAML; errors carry a JSON pointer and line/column."""
    try:
        root, data = compose_and_load(text)  # one parse: the tree locates errors
    except RecursionError:  # only PyYAML's pure-Python composer recurses (no libyaml)
        return None, [_error("invalid YAML: nested too deeply to parse", file)]
    except yaml.YAMLError as error:
        problem = getattr(error, "problem", None) or "malformed YAML"
        mark = getattr(error, "problem_mark", None)
        return None, [_error(f"invalid YAML: {problem}", file, mark)]
    if not isinstance(data, dict) or root is None:
        return None, [_error("a contract is a YAML mapping", file)]
    try:
        return Contract.model_validate(data), []
    except ValidationError as error:
        errors = error.errors(include_url=False, include_input=False)
    diagnostics: dict[tuple[str, str], Diagnostic] = {}  # each (pointer, rule) once
    for item in errors:
        loc, mark = _locate(data, root, item["loc"])
        pointer, rule = json_pointer(loc), item["msg"]
        if (pointer, rule) not in diagnostics:  # template syntax: located by pointer and offset
            code = codes.TEMPLATE_SYNTAX if item["type"] == "template_syntax" else codes.PARSE_YAML
            found = _error(f"{pointer or '/'}: {rule}", file, mark, code=code, json_pointer=pointer)
            diagnostics[pointer, rule] = found
    return None, list(diagnostics.values())


def read_contract(path: str | Path) -> tuple[Contract | None, list[Diagnostic]]:
    """Read and parse a contract file or source (``SCHEME:...``); unreadable is a diagnostic."""
    source = contract_source(os.fspath(path))
    if source is not None:  # ``langfuse:NAME@LABEL``, checked there
        found: tuple[Contract | None, list[Diagnostic]] = source(os.fspath(path))
        return found
    file = str(Path(path))
    try:
        with Path(path).open(encoding="utf-8") as stream:
            text = stream.read(MAX_CONTRACT_CHARS + 1)
    except (OSError, UnicodeDecodeError) as error:
        missing = isinstance(error, FileNotFoundError)
        code = NotFound.code if missing else IoFailure.code
        message = f"cannot read contract: {'no such file' if missing else type(error).__name__}"
        return None, [_error(message, file, code=code)]
    if len(text) > MAX_CONTRACT_CHARS:
        message = f"contract file is longer than {MAX_CONTRACT_CHARS} characters"
        return None, [_error(message, file, code=codes.DATA_INVALID)]
    return parse_contract(text, file=file)
