"""OpenAI's structured-outputs subset: one test per rule of the table, the strict form of a
schema, and the model form OpenAI's own SDK derives for ``response_format=Model``."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, Field

from templiqx_core import (
    InvalidData,
    OutputSchemaStrictError,
    StrictFinding,
    codes,
    model_output_schema,
    to_strict_schema,
)


def strict_findings(schema: Any) -> list[StrictFinding]:
    return list(to_strict_schema(schema).findings)


def obj(**properties: Any) -> dict[str, Any]:
    """A closed object with every property required: inside the subset."""
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


STRING = {"type": "string"}


def test_a_schema_inside_the_subset_has_no_findings_and_is_sent_as_written() -> None:
    schema = obj(
        name={"type": "string", "pattern": "^[a-z]+$", "format": "email", "description": "d"},
        score={"type": "number", "minimum": 0, "exclusiveMaximum": 1, "multipleOf": 0.5},
        tags={"type": "array", "items": STRING, "minItems": 1, "maxItems": 3},
        tier={"enum": ["a", "b"]},
        kind={"const": "x"},
        maybe={"anyOf": [STRING, {"type": "null"}]},
        nullable={"type": ["integer", "null"]},
        ref={"$ref": "#/$defs/Inner"},
    )
    schema["$defs"] = {"Inner": obj(x={"type": "boolean"})}
    assert strict_findings(schema) == []
    assert to_strict_schema(schema).schema == schema


# Each rule of the table: a schema breaking it, the finding's pointer, whether the strict
# form exists, and (when it does) what is sent at that place.
FIXABLE = [
    # keywords left out of what is sent (local validation still enforces them)
    ("minLength", {"type": "string", "minLength": 1}, "/properties/v/minLength", STRING),
    ("maxLength", {"type": "string", "maxLength": 9}, "/properties/v/maxLength", STRING),
    (
        "object size",
        {**obj(a=STRING), "minProperties": 1},
        "/properties/v/minProperties",
        obj(a=STRING),
    ),
    (
        "array uniqueness",
        {"type": "array", "items": STRING, "uniqueItems": True},
        "/properties/v/uniqueItems",
        {"type": "array", "items": STRING},
    ),
    ("negation", {"type": "string", "not": {"const": "x"}}, "/properties/v/not", STRING),
    ("annotation", {"type": "string", "default": "x"}, "/properties/v/default", STRING),
    ("unknown keyword", {"type": "string", "x-extra": 1}, "/properties/v/x-extra", STRING),
    ("format", {"type": "string", "format": "uri"}, "/properties/v/format", STRING),
    ("format not a name", {"type": "string", "format": []}, "/properties/v/format", STRING),
    (
        "required not names",
        {**obj(a=STRING), "required": [{}]},
        "/properties/v/required",
        obj(a=STRING),
    ),
    # rewritten into the subset
    (
        "oneOf",
        {"oneOf": [STRING, {"type": "integer"}]},
        "/properties/v/oneOf",
        {"anyOf": [STRING, {"type": "integer"}]},
    ),
    ("allOf of one", {"allOf": [STRING]}, "/properties/v/allOf", STRING),
    (
        "close objects",
        {"type": "object", "properties": {"a": STRING}, "required": ["a"]},
        "/properties/v",
        obj(a=STRING),
    ),
    (
        "all required",
        {**obj(a=STRING, b=STRING), "required": ["a"]},
        "/properties/v/required",
        obj(a=STRING, b=STRING),
    ),
    (
        "standalone $ref",
        {"$ref": "#/$defs/S", "description": "d"},
        "/properties/v",
        {"type": "string", "description": "d"},
    ),
]


@pytest.mark.parametrize(("rule", "value", "pointer", "sent"), FIXABLE, ids=[c[0] for c in FIXABLE])
def test_fixable_rule(rule: str, value: dict[str, Any], pointer: str, sent: Any) -> None:
    schema = {**obj(v=value), "$defs": {"S": STRING}}
    findings = strict_findings(schema)
    assert [(f.pointer, f.fixable) for f in findings] == [(pointer, True)], rule
    form = to_strict_schema(schema)
    assert form.schema is not None
    assert form.schema["properties"]["v"] == sent
    assert strict_findings(form.schema) == []  # the strict form is inside the subset


BLOCKING = [
    ("root object", {"type": "array", "items": STRING}, ""),
    ("root anyOf", {"anyOf": [obj(a=STRING), obj(b=STRING)]}, ""),
    ("open object", obj(v={"type": "object"}), "/properties/v"),
    (
        "open map",
        obj(v={"type": "object", "additionalProperties": STRING}),
        "/properties/v",
    ),
    ("any value", obj(v={}), "/properties/v"),
    ("any items", obj(v={"type": "array"}), "/properties/v"),
    ("tuples", obj(v={"type": "array", "prefixItems": [STRING]}), "/properties/v/prefixItems"),
    ("allOf of two", obj(v={"allOf": [STRING, STRING]}), "/properties/v/allOf"),
    # a boolean schema cannot be merged into its parent: a finding, not a TypeError
    ("allOf of a boolean", obj(v={"type": "string", "allOf": [True]}), "/properties/v/allOf"),
    (
        "pattern properties",
        obj(v={**obj(), "patternProperties": {"^x": STRING}}),
        "/properties/v/patternProperties",
    ),
    ("remote $ref", obj(v={"$ref": "https://example.invalid/s.json"}), "/properties/v/$ref"),
    ("type names", obj(v={"type": "str"}), "/properties/v/type"),
    ("type not a name", obj(v={"type": [{}]}), "/properties/v/type"),
    ("properties not a map", obj(v={"type": "object", "properties": [{}]}), "/properties/v"),
]


@pytest.mark.parametrize(("rule", "schema", "pointer"), BLOCKING, ids=[c[0] for c in BLOCKING])
def test_blocking_rule(rule: str, schema: dict[str, Any], pointer: str) -> None:
    blocking = [f for f in strict_findings(schema) if not f.fixable]
    assert pointer in [f.pointer for f in blocking], rule
    form = to_strict_schema(schema)
    assert form.schema is None
    caught = OutputSchemaStrictError(form.blocking)
    assert caught.code == codes.OUTPUT_SCHEMA_STRICT
    assert f"{pointer or '/'}: " in str(caught)


def nested(levels: int) -> dict[str, Any]:
    schema = obj(leaf=STRING)
    for _ in range(levels - 1):
        schema = obj(inner=schema)
    return schema


def test_at_most_ten_levels_of_nested_objects() -> None:
    assert strict_findings(nested(10)) == []
    assert [f.rule for f in strict_findings(nested(11))] == ["at most 10 levels of nested objects"]


def test_at_most_5000_properties_in_all() -> None:
    many = obj(**{f"p{i}": STRING for i in range(2500)})
    assert strict_findings(obj(a=many)) == []
    assert "at most 5000 object properties in all" in [
        f.rule for f in strict_findings(obj(a=many, b=many))
    ]


def test_at_most_1000_enum_values_in_all() -> None:
    values = {"enum": [str(i) for i in range(600)]}
    assert strict_findings(obj(a=values)) == []
    assert "at most 1000 enum values in all" in [
        f.rule for f in strict_findings(obj(a=values, b=values))
    ]


def test_every_finding_is_reported_at_once_and_the_argument_is_not_changed() -> None:
    schema = obj(a={"type": "string", "minLength": 1}, b={"type": "object"}, c={"type": "array"})
    before = repr(schema)
    pointers = [f.pointer for f in strict_findings(schema)]
    assert pointers == ["/properties/a/minLength", "/properties/b", "/properties/c"]
    assert repr(schema) == before


def test_a_dropped_keyword_still_holds_in_local_validation() -> None:
    schema = obj(name={"type": "string", "minLength": 2})
    sent = to_strict_schema(schema).schema
    jsonschema.validate({"name": "x"}, sent)  # the model may emit it under the sent form
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"name": "x"}, schema)  # and the contract's schema refuses it


def test_a_very_deep_schema_is_a_finding_not_a_recursion_error() -> None:
    schema: dict[str, Any] = {"type": "array", "items": STRING}
    for _ in range(2000):
        schema = {"type": "array", "items": schema}
    form = to_strict_schema(obj(v=schema))
    assert form.schema is None


class Inner(BaseModel):
    x: int = Field(ge=0, description="a count")


class Ticket(BaseModel):
    name: str = Field(min_length=1)
    tier: int | None = None
    inner: Inner
    described: Inner = Field(description="has siblings: inlined")
    inners: list[Inner] = []


class Open(BaseModel):
    mapping: dict[str, int]
    pair: tuple[int, str]


def test_model_output_schema_is_what_openai_python_derives() -> None:
    openai_pydantic = pytest.importorskip("openai.lib._pydantic")
    for model in (Ticket, Inner, Open):
        assert model_output_schema(model) == openai_pydantic.to_strict_json_schema(model)


def test_model_output_schema_closes_requires_and_keeps_the_models_types() -> None:
    schema = model_output_schema(Ticket)
    assert schema["additionalProperties"] is False
    assert schema["required"] == ["name", "tier", "inner", "described", "inners"]
    assert schema["properties"]["name"] == {"minLength": 1, "title": "Name", "type": "string"}
    assert schema["properties"]["inner"] == {"$ref": "#/$defs/Inner"}
    assert schema["properties"]["described"]["additionalProperties"] is False
    # Only what the subset lacks is left out of what is sent.
    assert [f.pointer for f in strict_findings(schema)] == [
        "/properties/name/minLength",
        "/properties/inners/default",
    ]
    assert model_output_schema(Ticket, strict=True) == schema


def test_a_model_without_a_strict_form_names_each_field() -> None:
    schema = model_output_schema(Open)  # returned as derived: sent non-strict under "auto"
    assert schema["properties"]["mapping"]["additionalProperties"] == {"type": "integer"}
    with pytest.raises(OutputSchemaStrictError) as caught:
        model_output_schema(Open, strict=True)
    pointers = {f.pointer for f in caught.value.findings}
    assert {"/properties/mapping", "/properties/pair/prefixItems"} <= pointers
    assert "output model Open" in str(caught.value)


def test_model_output_schema_takes_only_a_model_class() -> None:
    with pytest.raises(InvalidData):
        model_output_schema(dict)  # type: ignore[arg-type]


def test_a_recursive_schema_through_the_root_is_in_the_subset() -> None:
    tree = obj(name=STRING, children={"type": "array", "items": {"$ref": "#"}})
    assert strict_findings(tree) == []
    assert to_strict_schema(tree).schema == tree
