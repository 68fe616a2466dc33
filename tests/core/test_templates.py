"""String forms of content: ``{{ path | filter }}`` placeholders compile to exactly what
their long forms compile to; malformed ones are located ``TQX_TEMPLATE_SYNTAX``."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from templiqx_core import RenderRequest, codes
from templiqx_core._compiler import compile_contract, parse_contract
from templiqx_core._compiler.model import parse_template
from templiqx_core._loading import exponent_floats
from templiqx_core._receipts import request_fingerprint
from templiqx_core._typed import print_template

INPUTS = {
    "s": {"schema": {"type": "string"}, "required": True},
    "n": {"schema": {"type": "number"}, "required": True},
    "d": {"schema": {"type": "string"}, "required": True},
    "o": {
        "schema": {
            "type": "object",
            "properties": {"a": {"type": "string"}, "items": {"type": "array"}},
        },
        "required": True,
    },
    "opt": {"schema": {"type": "string"}},  # never given: only `default` reads it
}
VALUES = {
    "s": "  Mixed Case {{x}}  ",
    "n": 3.14159,
    "d": "2026-12-06",
    "o": {"a": "é", "items": [7]},
}


def document(*contents: Any, components: Any = None) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "api_version": "templiqx/v1alpha1",
        "id": "t",
        "version": "1",
        "inputs": INPUTS,
        "messages": [{"role": "user", "content": content} for content in contents],
        "output_schema": {"type": "object"},
    }
    if components is not None:
        doc["components"] = components
    return doc


@exponent_floats  # "0E0" quoted: the loader reads it as a float, as JSON and YAML 1.2 do
class _Dumper(yaml.SafeDumper):
    pass


def compiled(doc: dict[str, Any]) -> Any:
    # Escaped: PyYAML writes a raw NEL (U+0085) into a scalar that reads back as a line break.
    contract, diagnostics = parse_contract(yaml.dump(doc, Dumper=_Dumper))
    assert contract is not None, diagnostics
    result = compile_contract(contract, RenderRequest(inputs=VALUES))
    assert result.interaction is not None, result.diagnostics
    return result.interaction


def syntax_errors(content: str) -> list[tuple[str, str | None, str]]:
    _, diagnostics = parse_contract(yaml.safe_dump(document("ok", content)))
    return [(d.code, d.json_pointer, d.message) for d in diagnostics]


# Long forms: text (braces, quotes, pipes and newlines are likely) and placeholders.
TEXT = st.text(alphabet=st.sampled_from('ab{}|" \n\\é'), max_size=12) | st.text(
    alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12
)
FILTERS: dict[str, list[Any]] = {
    "inputs.s": ["trim", "lower", "upper", "json", {"name": "trim"}],
    "inputs.o.a": ["upper", "json"],
    "inputs.n": ["json", {"name": "format_number", "decimals": 2}, {"name": "format_number"}],
    "inputs.d": [{"name": "format_date", "format": '%d "%B" }} %Y'}, "upper"],
    "inputs.o.items.0": ["json"],
    "inputs.o": ["json"],
    "inputs.opt": [{"name": "default", "value": 'q"}} {{x'}, {"name": "default"}],
}


@st.composite
def placeholders(draw: st.DrawFn) -> dict[str, Any]:
    path = draw(st.sampled_from(sorted(FILTERS)))
    options = FILTERS[path]
    filters = [draw(st.sampled_from(options))] if path in ("inputs.o", "inputs.opt") else []
    if path not in ("inputs.o", "inputs.opt"):
        filters = draw(st.lists(st.sampled_from(options), max_size=1))
        if path == "inputs.s":
            filters += draw(st.lists(st.sampled_from(["trim", "lower", "upper"]), max_size=2))
    expression = {"kind": "ref", "path": path}
    return {"kind": "interpolate", "expression": expression, "filters": filters}


NODES = st.lists(
    st.builds(lambda v: {"kind": "text", "value": v}, TEXT) | placeholders(), max_size=8
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(NODES)
@example([{"kind": "text", "value": " "}, {"kind": "text", "value": "\x85"}])  # a NEL
def test_a_printed_long_form_compiles_to_the_same_interaction(nodes: list[Any]) -> None:
    short = print_template(nodes)
    assert short is not None
    long_form, string_form = compiled(document(nodes)), compiled(document(short))
    assert string_form.model_dump_json() == long_form.model_dump_json()
    assert request_fingerprint(string_form) == request_fingerprint(long_form)


def test_placeholders_stand_for_interpolate_nodes() -> None:
    assert parse_template("Hi {{inputs.s|trim}} {{ inputs.n | format_number(decimals=1) }}!") == [
        {"kind": "text", "value": "Hi "},
        {
            "kind": "interpolate",
            "expression": {"kind": "ref", "path": "inputs.s"},
            "filters": ["trim"],
        },
        {"kind": "text", "value": " "},
        {
            "kind": "interpolate",
            "expression": {"kind": "ref", "path": "inputs.n"},
            "filters": [{"name": "format_number", "decimals": 1}],
        },
        {"kind": "text", "value": "!"},
    ]
    assert parse_template("") == []


def test_a_json_string_placeholder_is_literal_text() -> None:
    text = 'a {{ "{{" }} b }} {{ "{" }}{{ inputs.s }}'
    interaction = compiled(document(text))
    assert interaction.messages[0].content == "a {{ b }} {" + VALUES["s"]
    assert print_template(parse_template(text)) == text


def test_text_nodes_stay_literal() -> None:
    literal = [{"kind": "text", "value": "{{ inputs.s }} {{ broken"}]
    assert compiled(document(literal)).messages[0].content == "{{ inputs.s }} {{ broken"


def test_yaml_block_scalars_keep_or_strip_the_trailing_newline() -> None:
    doc = document("x")
    del doc["messages"]
    kept = (
        yaml.safe_dump(doc)
        + "messages:\n- role: user\n  content: |\n    Tier {{ inputs.s | trim }}\n"
    )
    stripped = kept.replace("content: |", "content: |-")
    texts = []
    for text in (kept, stripped):
        contract, diagnostics = parse_contract(text)
        assert contract is not None, diagnostics
        result = compile_contract(contract, RenderRequest(inputs=VALUES))
        assert result.interaction is not None
        texts.append(result.interaction.messages[0].content)
    assert texts == ["Tier Mixed Case {{x}}\n", "Tier Mixed Case {{x}}"]


def test_string_forms_in_bodies_and_components() -> None:
    when = {
        "kind": "when",
        "condition": {"kind": "literal", "value": True},
        "then": "T {{ inputs.o.a }}",
    }
    loop = {
        "kind": "for_each",
        "collection": {"kind": "ref", "path": "inputs.o.items"},
        "item": "i",
        "body": "<{{ i | json }}>",
    }
    typed = {
        "kind": "component",
        "name": "sig",
        "with": {"who": {"kind": "ref", "path": "inputs.s"}},
    }
    legacy = {
        "kind": "component",
        "name": "plain",
        "with": {"v": {"kind": "ref", "path": "inputs.d"}},
    }
    components = {
        "sig": {
            "parameters": {"who": {"schema": {"type": "string"}}},
            "content": "-- {{ who | trim }}",
        },
        "plain": 'on {{ v | format_date(format="%d.%m.") }}',
    }
    interaction = compiled(document([when, loop, typed, legacy], components=components))
    assert interaction.messages[0].content == "T é<7>-- Mixed Case {{x}}on 06.12."


@pytest.mark.parametrize(
    ("content", "offset", "reason"),
    [
        ("x {{ inputs.s", 13, "unclosed or malformed placeholder"),
        ("{{ }}", 3, "expected a reference path"),
        ("{{ inputs..s }}", 9, "expected '}}'"),
        ("{{ inputs.s | }}", 14, "expected a filter name"),
        ("{{ inputs.s | shout }}", 14, "unknown filter 'shout'"),
        ("{{ inputs.n | format_number(decimals=-1) }}", 14, "greater than or equal to 0"),
        ("{{ inputs.n | format_number(decimals=1 }}", 39, "expected ',' or ')'"),
        ("{{ inputs.n | format_number(decimals=NaN) }}", 37, "expected a JSON literal"),
        ("{{ inputs.n | format_number(decimals=1, decimals=2) }}", 48, "given twice"),
        ("{{ inputs.d | format_date(format=1) }}", 14, "valid string"),
        ("{{ inputs.d | format_date(colour=1) }}", 14, "colour"),
        ('{{ "never closed }}', 3, "expected a JSON literal"),
        ("{{{ inputs.s }}}", 2, "expected a reference path"),
        ("{{ inputs.d | format_date(format=" + "[" * 50_000 + ") }}", 33, "JSON literal"),
        ("{{ inputs.n | format_number(decimals=1" + "0" * 5000 + ") }}", 37, "JSON literal"),
    ],
)
def test_malformed_placeholders_are_located(content: str, offset: int, reason: str) -> None:
    [(code, pointer, message)] = syntax_errors(content)
    assert (code, pointer) == (codes.TEMPLATE_SYNTAX, "/messages/1/content")
    assert reason in message
    assert message.endswith(f"at character {offset}")


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        ('{{ inputs.s | default(value="\\ud800") }}', "a string with a lone surrogate"),
        ('{{ "\\udfff" }}', "a string with a lone surrogate"),
        ("{{ inputs.n | default(value=1e400) }}", "a non-finite number"),
        ('{{ inputs.s | default(value=[1, {"a": -1e999}]) }}', "a non-finite number"),
    ],
)
def test_a_json_literal_json_cannot_hold_is_a_syntax_error(content: str, reason: str) -> None:
    """Decoded, these are not JSON values: a placeholder would render a message no request
    can carry (exit 1 at compile, after a clean check) or the text ``inf``."""
    [(code, pointer, message)] = syntax_errors(content)
    assert (code, pointer) == (codes.TEMPLATE_SYNTAX, "/messages/1/content")
    assert reason in message


@pytest.mark.parametrize(
    "content",
    [
        "{{ inputs.n | format_number(value=2) }}",
        '{{ inputs.s | upper(value="x") }}',
        "{{ inputs.s | default(decimals=2) }}",
        '{{ inputs.s | json(format="%Y") }}',
    ],
)
def test_an_argument_of_another_filter_is_an_error_not_ignored(content: str) -> None:
    """Each filter takes its own arguments (default: value, format_date: format,
    format_number: decimals); another one's is a mistake, not a no-op."""
    [(code, pointer, message)] = syntax_errors(content)
    assert (code, pointer) == (codes.TEMPLATE_SYNTAX, "/messages/1/content")
    assert "takes" in message


def test_a_bad_template_in_a_component_is_one_located_error() -> None:
    contract, diagnostics = parse_contract(
        yaml.safe_dump(document("ok", components={"c": "{{ v |"}))
    )
    assert contract is None
    assert [(d.code, d.json_pointer) for d in diagnostics] == [
        (codes.TEMPLATE_SYNTAX, "/components/c")
    ]


def test_long_forms_without_a_string_form() -> None:
    assert print_template([{"kind": "when", "condition": {}, "then": []}]) is None
    literal = {"kind": "interpolate", "expression": {"kind": "literal", "value": "x"}}
    assert print_template([literal]) is None
    odd_path = {"kind": "interpolate", "expression": {"kind": "ref", "path": "inputs.a-b"}}
    assert print_template([odd_path]) is None


def test_a_diagnostic_inside_a_string_form_points_at_the_node_it_stands_for() -> None:
    when = {
        "kind": "when",
        "condition": {"kind": "literal", "value": True},
        "then": "{{ inputs.nope }}",
    }
    doc = document("ok {{ inputs.s }} then {{ inputs.o | upper }}", [when])
    contract, diagnostics = parse_contract(yaml.safe_dump(doc))
    assert contract is not None, diagnostics
    result = compile_contract(contract, RenderRequest(inputs=VALUES))
    assert [(d.code, d.json_pointer) for d in result.diagnostics] == [
        (codes.INTERPOLATION_TYPE, "/messages/0/content/3/expression"),
        (codes.REF_UNKNOWN, "/messages/1/content/0/then/0/expression"),
    ]


def test_a_string_inside_a_node_list_says_a_string_stands_for_a_whole_content() -> None:
    """A list mixing strings and nodes was pydantic's "a valid dictionary" at the string."""
    body = ["Order {{ inputs.s }}", {"kind": "text", "value": "."}]
    when = {"kind": "when", "condition": {"kind": "literal", "value": True}, "then": body}
    _, diagnostics = parse_contract(yaml.safe_dump(document([when])))
    assert [(d.code, d.json_pointer) for d in diagnostics] == [
        ("TQX_PARSE_YAML", "/messages/0/content/0/then")
    ]
    assert "a string stands for a whole content" in diagnostics[0].message
