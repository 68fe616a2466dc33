"""Diagnostics name the failing value (JSON pointer) and the rule (keyword and its value),
one per failure, for inputs, context and model output, and never quote the value."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from templiqx_core import (
    Contract,
    RenderRequest,
    ScriptedRuntime,
    ScriptedSuccess,
    compile_contract,
    execute_contract,
)
from templiqx_core._schema import MAX_FAILURES

SECRET = "sk-live-do-not-echo-0123456789"

# One property per keyword family, each with the value that breaks it and the line.
FAMILIES: list[tuple[str, dict[str, Any], Any, str]] = [
    ("type", {"type": "string"}, 5, "/field: not of type string"),
    ("enum", {"enum": [1, 2, 3]}, 7, "/field: fails enum [1, 2, 3]"),
    ("const", {"const": "yes"}, "no", '/field: fails const "yes"'),
    ("minLength", {"type": "string", "minLength": 1}, "", "/field: fails minLength 1"),
    ("maxLength", {"type": "string", "maxLength": 2}, "abc", "/field: fails maxLength 2"),
    ("minimum", {"type": "integer", "minimum": 3}, 1, "/field: fails minimum 3"),
    ("maximum", {"type": "integer", "maximum": 3}, 9, "/field: fails maximum 3"),
    (
        "exclusiveMinimum",
        {"type": "number", "exclusiveMinimum": 0},
        0,
        "/field: fails exclusiveMinimum 0",
    ),
    ("minItems", {"type": "array", "minItems": 2}, [1], "/field: fails minItems 2"),
    ("maxItems", {"type": "array", "maxItems": 1}, [1, 2], "/field: fails maxItems 1"),
    (
        "pattern",
        {"type": "string", "pattern": "^T-[0-9]+$"},
        "X-1",
        '/field: fails pattern "^T-[0-9]+$"',
    ),
    (
        "format",
        {"type": "string", "format": "date"},
        "31/12",
        '/field: fails format "date"',
    ),
    (
        "format",
        {"type": "string", "format": "date-time"},
        "yesterday",
        '/field: fails format "date-time"',
    ),
    (
        "required",
        {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]},
        {},
        "/field/id: missing (required)",
    ),
    (
        "additionalProperties",
        {"type": "object", "properties": {"id": {}}, "additionalProperties": False},
        {SECRET: 1, "other": 2},
        "/field: fails additionalProperties",
    ),
    (
        "additionalProperties",
        {"type": "object", "additionalProperties": False},
        {SECRET: 1},
        "/field: fails additionalProperties",
    ),
]
IDS = [f"{keyword}-{index}" for index, (keyword, *_) in enumerate(FAMILIES)]


def contract(
    *, inputs: dict[str, Any] | None = None, output_schema: dict[str, Any] | None = None
) -> Contract:
    return Contract.model_validate(
        {
            "api_version": "templiqx/v1alpha1",
            "id": "triage",
            "version": "1",
            "inputs": {
                name: {"schema": schema, "required": True}
                for name, schema in (inputs or {}).items()
            },
            "messages": [{"role": "user", "content": [{"kind": "text", "value": "Triage."}]}],
            "output_schema": output_schema or {"type": "object"},
        }
    )


def lines(diagnostics: list[Any]) -> list[tuple[str, str, str | None]]:
    return [(d.code, d.message, d.json_pointer) for d in diagnostics]


@pytest.mark.parametrize(("keyword", "schema", "value", "expected"), FAMILIES, ids=IDS)
def test_an_input_failing_its_schema_names_the_pointer_and_the_keyword(
    keyword: str, schema: dict[str, Any], value: Any, expected: str
) -> None:
    result = compile_contract(
        contract(inputs={"field": schema}), RenderRequest(inputs={"field": value}), []
    )
    pointer = "/inputs/field" + expected.split(":")[0].removeprefix("/field")
    assert lines(result.diagnostics) == [("TQX_VALUE_SCHEMA", expected, pointer)]


@pytest.mark.parametrize(("keyword", "schema", "value", "expected"), FAMILIES, ids=IDS)
def test_output_failing_the_schema_names_the_pointer_and_the_keyword(
    keyword: str, schema: dict[str, Any], value: Any, expected: str
) -> None:
    output_schema = {"type": "object", "properties": {"field": schema}}
    envelope = execute_contract(
        contract(output_schema=output_schema),
        RenderRequest(),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=[],
        fixture_output={"field": value},
    )
    assert not envelope.ok
    summary, *details = envelope.diagnostics
    assert (summary.message, summary.json_pointer) == (
        "runtime output does not satisfy the contract schema",
        "/output",
    )
    pointer = "/output" + expected.split(":")[0]
    assert lines(details) == [("TQX_OUTPUT_SCHEMA", expected, pointer)]


def test_context_values_are_checked_as_inputs() -> None:
    spec = Contract.model_validate(
        {
            **contract().model_dump(by_alias=True),
            "context": {"tenant": {"schema": {"type": "string", "pattern": "^t-"}}},
        }
    )
    result = compile_contract(spec, RenderRequest(context={"tenant": "acme"}), [])
    assert lines(result.diagnostics) == [
        ("TQX_VALUE_SCHEMA", '/tenant: fails pattern "^t-"', "/context/tenant")
    ]


def test_each_failure_is_its_own_diagnostic() -> None:
    schema = {
        "type": "object",
        "required": ["subject", "priority"],
        "properties": {"subject": {"type": "string"}, "priority": {"enum": [1, 2, 3]}},
    }
    envelope = execute_contract(
        contract(output_schema=schema),
        RenderRequest(),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=[],
        fixture_output={"priority": 5, "subject": None},
    )
    assert sorted(d.message for d in envelope.diagnostics[1:]) == [
        "/priority: fails enum [1, 2, 3]",
        "/subject: not of type string",
    ]


def test_failures_past_the_bound_are_counted_not_listed() -> None:
    schema = {"type": "array", "items": {"type": "integer"}}
    result = compile_contract(
        contract(inputs={"ids": schema}), RenderRequest(inputs={"ids": ["x"] * 50}), []
    )
    assert len(result.diagnostics) == MAX_FAILURES + 1
    assert result.diagnostics[0].message == "/ids/0: not of type integer"
    assert result.diagnostics[-1].message == "/ids: 30 more schema failure(s) not shown"


def test_no_diagnostic_quotes_the_failing_value_or_an_undeclared_key() -> None:
    schema = {
        "type": "object",
        "properties": {"name": {"type": "integer", "enum": [1]}},
        "additionalProperties": {"type": "integer"},
    }
    envelope = execute_contract(
        contract(output_schema=schema),
        RenderRequest(),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=[],
        fixture_output={"name": SECRET, SECRET: SECRET},
    )
    assert SECRET not in str([d.to_json() for d in envelope.diagnostics])
    assert sorted(lines(envelope.diagnostics[1:])) == [
        ("TQX_OUTPUT_SCHEMA", "/*: not of type integer", "/output/*"),
        ("TQX_OUTPUT_SCHEMA", "/name: fails enum [1]", "/output/name"),
        ("TQX_OUTPUT_SCHEMA", "/name: not of type integer", "/output/name"),
    ]


def test_a_component_argument_off_its_parameter_schema_names_the_rule() -> None:
    spec = Contract.model_validate(
        {
            **contract().model_dump(by_alias=True),
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {
                            "kind": "component",
                            "name": "sig",
                            "with": {"who": {"kind": "literal", "value": SECRET}},
                        }
                    ],
                }
            ],
            "components": {
                "sig": {
                    "parameters": {"who": {"schema": {"type": "string", "maxLength": 3}}},
                    "content": [{"kind": "text", "value": "x"}],
                }
            },
        }
    )
    result = compile_contract(spec, RenderRequest(), [])
    assert lines(result.diagnostics) == [
        (
            "TQX_COMPONENT_ARGUMENT_TYPE",
            "argument 'who' does not match the parameter's schema: /: fails maxLength 3",
            "/messages/0/content/0/with/who",
        )
    ]


def test_an_extension_value_off_its_schema_names_the_rule() -> None:
    spec = Contract.model_validate(
        {
            **contract().model_dump(by_alias=True),
            "extensions": {
                "openai.reasoning_effort": {
                    "capability": "reasoning",
                    "schema": {"enum": ["low", "high"]},
                    "value": "max",
                }
            },
        }
    )
    result = compile_contract(spec, RenderRequest(), ["reasoning"])
    assert lines(result.diagnostics) == [
        (
            "TQX_EXTENSION_SCHEMA",
            "extension 'openai.reasoning_effort' value does not match its schema: "
            '/: fails enum ["low", "high"]',
            "/extensions/openai.reasoning_effort/value",
        )
    ]


# Strings that cannot spell a word of a rule (which would "quote" them by coincidence).
MARKED = st.text(alphabet="QXZJKVW0123456789", min_size=8, max_size=20)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | MARKED,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(MARKED, inner, max_size=4),
    max_leaves=12,
)
OUTPUT_SCHEMA = {
    "type": "object",
    "required": ["id", "tags"],
    "additionalProperties": {"type": "integer"},
    "properties": {
        "id": {"type": "string", "pattern": "^T-", "maxLength": 5},
        "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 1},
        "when": {"type": "string", "format": "date"},
    },
}


def _strings(value: Any) -> set[str]:
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set(value).union(*(_strings(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(_strings(v) for v in value))
    return set()


@settings(max_examples=150, deadline=None)
@given(st.dictionaries(st.sampled_from(["id", "tags", "when"]) | MARKED, JSON_VALUES))
def test_no_output_diagnostic_ever_quotes_a_string_of_the_output(output: dict[str, Any]) -> None:
    envelope = execute_contract(
        contract(output_schema=OUTPUT_SCHEMA),
        RenderRequest(),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=[],
        fixture_output=output,
    )
    texts = [f"{d.message} {d.json_pointer}" for d in envelope.diagnostics]
    declared = {"id", "tags", "when"}
    assert not [(s, t) for s in _strings(output) - declared for t in texts if s in t]
    assert len(envelope.diagnostics) <= MAX_FAILURES + 2


def test_an_undeclared_key_that_looks_like_a_number_is_not_shown() -> None:
    schema = {"type": "object", "additionalProperties": {"type": "integer"}}
    envelope = execute_contract(
        contract(output_schema=schema),
        RenderRequest(),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=[],
        fixture_output={"4111111111111111": None, "items": [0, "x"]},
    )
    assert sorted(lines(envelope.diagnostics[1:])) == [
        ("TQX_OUTPUT_SCHEMA", "/*: not of type integer", "/output/*"),
        ("TQX_OUTPUT_SCHEMA", "/*: not of type integer", "/output/*"),
    ]
