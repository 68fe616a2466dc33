"""Optional values read through ``exists`` and ``default``, as a contract author meets them:
explicit arguments, component parameters, loops, the short form's round trip."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from templiqx_core import RenderRequest, check_envelope
from templiqx_core._compiler import CompileResult, compile_contract, parse_contract
from templiqx_core._compiler.model import parse_template
from templiqx_core._typed import print_template


def compiled(extra: dict[str, Any], inputs: dict[str, Any] | None = None) -> CompileResult:
    doc = {
        "api_version": "templiqx/v1alpha1",
        "id": "optional",
        "version": "1",
        "output_schema": {"type": "object"},
        **extra,
    }
    parsed, problems = parse_contract(yaml.safe_dump(doc, allow_unicode=True))
    assert parsed is not None, problems
    return compile_contract(parsed, RenderRequest(inputs=inputs or {}), [])


def checked(tmp_path: Path, extra: dict[str, Any]) -> list[tuple[str, str | None]]:
    """What ``templiqx check`` finds: no values, the contract's own evals."""
    doc = {
        "api_version": "templiqx/v1alpha1",
        "id": "optional",
        "version": "1",
        "output_schema": {"type": "object"},
        **extra,
    }
    path = tmp_path / "optional.yaml"
    path.write_text(yaml.safe_dump(doc, allow_unicode=True), encoding="utf-8")
    found = check_envelope(path).diagnostics
    return [(d.code, d.json_pointer) for d in found if d.severity == "error"]


def compile_messages(
    extra: dict[str, Any], inputs: dict[str, Any] | None = None
) -> tuple[list[str] | None, list[tuple[str, str | None]]]:
    result = compiled(extra, inputs)
    found = [(d.code, d.json_pointer) for d in result.diagnostics]
    if result.interaction is None:
        return None, found
    return [m.content for m in result.interaction.messages], found


NICK = {"nick": {"schema": {"type": ["string", "null"]}}}


def test_default_value_null_is_null_not_the_empty_string() -> None:
    """``default(value=null)`` stands for null (which ``json`` writes), as any JSON value."""
    content = "{{ inputs.nick | default(value=null) | json }}"
    extra = {"inputs": NICK, "messages": [{"role": "user", "content": content}]}
    assert compile_messages(extra) == (["null"], [])
    assert compile_messages(extra, {"nick": "Bo"}) == (['"Bo"'], [])


def test_default_value_null_survives_the_short_form_round_trip() -> None:
    text = "{{ inputs.nick | default(value=null) | json }}"
    assert print_template(parse_template(text)) == text


def greet(content: Any) -> dict[str, Any]:
    """A typed component whose optional parameter ``who`` the message does not give."""
    return {
        "components": {
            "greet": {"parameters": {"who": {"schema": {"type": "string"}}}, "content": content}
        },
        "messages": [{"role": "user", "content": [{"kind": "component", "name": "greet"}]}],
    }


def test_an_optional_parameter_not_given_is_absent_to_exists_and_default() -> None:
    guarded = [
        {
            "kind": "when",
            "condition": {"kind": "exists", "path": "who"},
            "then": "Hi {{ who }}",
            "else": "Hi stranger",
        }
    ]
    assert compile_messages(greet(guarded)) == (["Hi stranger"], [])
    assert compile_messages(greet('Hi {{ who | default(value="you") }}')) == (["Hi you"], [])


def test_an_optional_parameter_not_given_read_plainly_is_ref_unknown_not_empty() -> None:
    text, found = compile_messages(greet("Hi {{ who }}"))
    assert (text, [code for code, _ in found]) == (None, ["TQX_REF_UNKNOWN"])


def test_a_diagnostic_in_a_typed_component_points_into_its_content() -> None:
    """A typed component's nodes are under ``content`` (a legacy one's are the component)."""
    extra = greet("Hi {{ who | default }}, {{ whom }}")
    found = [("TQX_REF_UNKNOWN", "/components/greet/content/3/expression")]
    assert compile_messages(extra) == (None, found)


def test_a_default_after_another_filter_is_found_by_check_not_first_by_a_request(
    tmp_path: Path,
) -> None:
    """``upper`` meets an absent value before ``default`` can fill it: whether or not an eval
    leaves the value out, ``check`` says so, as every compile does."""
    content = "{{ inputs.nick | upper | default }}"
    extra = {"inputs": NICK, "messages": [{"role": "user", "content": content}]}
    found = [("TQX_REF_UNKNOWN", "/messages/0/content/0/filters/0")]
    assert checked(tmp_path, extra) == found
    assert compile_messages(extra, {"nick": "Bo"}) == (None, found)


def test_a_default_the_filters_after_it_cannot_take_is_found_by_check(tmp_path: Path) -> None:
    """The stand-in is known without a request: ``check`` passes it through the rest of the
    filters, as a request leaving the value out would, not only when an eval does."""
    amount = {"amount": {"schema": {"type": ["number", "null"]}}}
    for content, found in [
        (
            '{{ inputs.amount | default(value="n/a") | format_number(decimals=2) }}',
            ("TQX_FILTER_TYPE", "/messages/0/content/0/filters/1"),
        ),
        (
            '{{ inputs.amount | default(value={"a": 1}) }}',
            ("TQX_INTERPOLATION_TYPE", "/messages/0/content/0/expression"),
        ),
    ]:
        extra = {"inputs": amount, "messages": [{"role": "user", "content": content}]}
        assert checked(tmp_path, extra) == [found], content
        assert compile_messages(extra, {"amount": 2}) == (None, [found]), content
        assert compile_messages(extra) == (None, [found]), content  # once, not twice
    fine = "{{ inputs.amount | default(value=0) | format_number(decimals=2) }}"
    extra = {"inputs": amount, "messages": [{"role": "user", "content": fine}]}
    assert checked(tmp_path, extra) == []
    assert compile_messages(extra) == (["0.00"], [])
    assert compile_messages(extra, {"amount": 2}) == (["2.00"], [])


def forwarding(required: bool) -> dict[str, Any]:
    """A message passing the optional input ``nick`` on to a component's parameter."""
    parameter = {"schema": {"type": ["string", "null"]}, "required": required}
    use = {
        "kind": "component",
        "name": "sig",
        "with": {"nick": {"kind": "ref", "path": "inputs.nick"}},
    }
    return {
        "inputs": NICK,
        "components": {
            "sig": {
                "parameters": {"nick": parameter},
                "content": 'Hi {{ nick | default(value="friend") }}',
            },
            "legacy": 'Yo {{ nick | default(value="you") }}',
        },
        "messages": [
            {"role": "user", "content": [use]},
            {"role": "user", "content": [{**use, "name": "legacy"}]},
        ],
    }


def test_an_absent_value_passed_on_is_absent_in_the_component_as_null_is() -> None:
    """A typed contract passes its ``None`` as null; a request (CLI, MCP) leaves it out: the
    component's ``default`` fills either, so the YAML compiles as the typed contract does."""
    assert compile_messages(forwarding(False), {"nick": None}) == (["Hi friend", "Yo you"], [])
    assert compile_messages(forwarding(False)) == (["Hi friend", "Yo you"], [])
    assert compile_messages(forwarding(False), {"nick": "Bo"}) == (["Hi Bo", "Yo Bo"], [])


def test_an_absent_value_passed_to_a_required_parameter_is_ref_unknown() -> None:
    found = [("TQX_REF_UNKNOWN", "/messages/0/content/0/with/nick")]
    assert compile_messages(forwarding(True)) == (None, found)
    untaken = forwarding(True)
    for message in untaken["messages"]:
        guard = {"kind": "exists", "path": "inputs.nick"}
        message["content"] = [{"kind": "when", "condition": guard, "then": message["content"]}]
    assert compile_messages(untaken) == (["", ""], [])


def test_a_value_yaml_reads_as_a_non_finite_number_is_refused_where_it_is() -> None:
    """``.inf`` is a YAML float JSON cannot hold: as a default's or a literal's value it
    rendered "inf", and in ``runtime_policy`` it was sent as null."""
    node = {"kind": "interpolate", "expression": {"kind": "ref", "path": "inputs.nick"}}
    at = "/messages/0/content/0"
    for content, policy, pointer in [
        ([{**node, "filters": [{"name": "default", "value": "INF"}]}], {}, f"{at}/filters/0/value"),
        ([{**node, "expression": {"kind": "literal", "value": ["INF"]}}], {}, f"{at}/expression"),
        ("hi", {"temperature": "INF"}, "/runtime_policy/temperature"),
    ]:
        doc = {
            "api_version": "templiqx/v1alpha1",
            "id": "inf",
            "version": "1",
            "inputs": NICK,
            "messages": [{"role": "user", "content": content}],
            "output_schema": {"type": "object"},
            "runtime_policy": policy,
        }
        text = yaml.safe_dump(doc).replace("INF", ".inf")
        contract, found = parse_contract(text)
        assert contract is None
        (refused,) = (d for d in found if (d.json_pointer or "").startswith(pointer))
        assert refused.code == "TQX_PARSE_YAML"
        assert "finite number" in refused.message


def test_an_optional_value_read_plainly_names_the_way_to_read_it() -> None:
    """Left out or null, a plain ``{{ inputs.nick }}`` fails; the message says how to read it
    (a pydantic ``X | None`` field is null: "without the json filter" alone misleads)."""
    extra = {"inputs": NICK, "messages": [{"role": "user", "content": "Hi {{ inputs.nick }}"}]}
    for inputs in ({}, {"nick": None}):
        (found,) = compiled(extra, inputs).diagnostics
        assert "read it through the default filter, or test it with exists" in found.message
