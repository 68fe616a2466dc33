"""A broken contract's problems come one per fault, all in one pass, each with its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from templiqx_core import RenderRequest, check_envelope, compile_contract, parse_contract

HEAD = """\
api_version: templiqx/v1alpha1
id: demo
version: "1"
inputs:
  subject: {schema: {type: string}, required: true}
messages:
  - role: user
    content: "Hi {{ inputs.subject }}"
output_schema: {type: object}
evals:
  - id: one
    inputs: {subject: x}
    fake_output: {}
    assert:
"""

BAD_CHECKS = [  # (entry, pointer, message)
    (
        "{equals: 1, matches: x}",
        "/evals/0/assert/0",
        "an assert check has exactly one of equals, contains, matches, min/max, type, "
        "schema_valid, max_latency_ms, max_tokens",
    ),
    ("{min_latency: 3}", "/evals/0/assert/0", "an assert check has exactly one of"),
    ("equals", "/evals/0/assert/0", "an assert check has exactly one of"),
    (
        "{pointer: nope, type: string}",
        "/evals/0/assert/0/pointer",
        "String should match pattern '^(/.*)?$'",
    ),
    ("{type: text}", "/evals/0/assert/0/type", "Input should be 'string'"),
    ("{min: 1, max: 2, name: 7}", "/evals/0/assert/0/name", "Input should be a valid string"),
]


@pytest.mark.parametrize(("entry", "pointer", "message"), BAD_CHECKS)
def test_a_malformed_check_is_one_diagnostic_naming_it(
    entry: str, pointer: str, message: str
) -> None:
    contract, diagnostics = parse_contract(f"{HEAD}      - {entry}\n")
    assert contract is None
    assert len(diagnostics) == 1, diagnostics
    assert diagnostics[0].code == "TQX_PARSE_YAML"
    assert diagnostics[0].json_pointer == pointer
    assert diagnostics[0].message.startswith(f"{pointer}: {message}")
    assert diagnostics[0].span is not None
    assert diagnostics[0].span.line == 15


def test_every_kind_of_check_still_parses() -> None:
    entries = [
        "{equals: 1}",
        "{pointer: /a, contains: x, name: c}",
        "{matches: '^a'}",
        "{min: 1}",
        "{max: 2}",
        "{type: string}",
        "{schema_valid: true}",
        "{max_latency_ms: 10}",
        "{max_tokens: 5}",
    ]
    text = HEAD + "".join(f"      - {entry}\n" for entry in entries)
    contract, diagnostics = parse_contract(text)
    assert diagnostics == []
    assert contract is not None
    kinds = [type(check).__name__ for check in contract.evals[0].assert_]
    assert kinds == [
        "EqualsCheck",
        "ContainsCheck",
        "MatchesCheck",
        "RangeCheck",
        "RangeCheck",
        "TypeCheck",
        "SchemaValidCheck",
        "LatencyCheck",
        "TokensCheck",
    ]


def test_an_unknown_reference_in_a_string_template_points_at_its_node(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(HEAD.replace('}}"', '}} {{ nope }}"') + "      []\n")
    result = compile_contract(path, RenderRequest(inputs={"subject": "x"}))
    [found] = result.diagnostics
    assert found.code == "TQX_REF_UNKNOWN"
    assert found.json_pointer == "/messages/0/content/3/expression"
    assert "'nope'" in found.message
    [checked] = check_envelope(path).diagnostics
    assert checked == found


def test_check_reports_parse_errors_first_then_the_rest(tmp_path: Path) -> None:
    """A template syntax error is a parse error: check reports it (every one pydantic finds)
    and, once fixed, what rendering finds, as compile does."""
    path = tmp_path / "c.yaml"
    text = HEAD.replace("subject }}", "subject | bogus }}")
    text = text.replace("output_schema: {type: object}", "output_schema: {type: objec}")
    path.write_text(text + "      - {pointer: x}\n")
    found = [(d.code, d.json_pointer) for d in check_envelope(path).diagnostics]
    assert found == [
        ("TQX_TEMPLATE_SYNTAX", "/messages/0/content"),
        ("TQX_PARSE_YAML", "/evals/0/assert/0"),
    ]
    compiled = compile_contract(path, RenderRequest(inputs={"subject": "x"}))
    assert [d.code for d in compiled.diagnostics] == ["TQX_TEMPLATE_SYNTAX", "TQX_PARSE_YAML"]
    path.write_text(
        HEAD.replace("output_schema: {type: object}", "output_schema: {type: objec}") + "      []\n"
    )
    found = [(d.code, d.json_pointer) for d in check_envelope(path).diagnostics]
    assert found == [("TQX_VALUE_SCHEMA", "/output_schema")]


def test_check_refuses_an_eval_id_that_appears_twice(tmp_path: Path) -> None:
    """Results, --resume and Langfuse dataset items key on eval ids (--cases refuses too)."""
    path = tmp_path / "c.yaml"
    path.write_text(
        HEAD.removesuffix("    assert:\n")
        + "  - id: one\n    inputs: {subject: y}\n    fake_output: {}\n"
    )
    found = [(d.code, d.json_pointer, d.message) for d in check_envelope(path).diagnostics]
    assert found == [
        ("TQX_DATA_INVALID", "/evals/1/id", "eval id 'one' appears twice (first at /evals/0)")
    ]
