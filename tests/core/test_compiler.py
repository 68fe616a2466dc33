from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from templiqx_core import RenderRequest, ScriptedRuntime, ScriptedSuccess, execute_contract
from templiqx_core._compiler import COMPILER_ID, compile_contract, parse_contract
from tests.conftest import read_json


def contract(content: list[Any], **overrides: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "api_version": "templiqx/v1alpha1",
        "id": "t",
        "version": "1.0.0",
        "inputs": {
            "name": {"schema": {"type": "string"}, "required": True},
            "tags": {"schema": {"type": "array", "items": {"type": "string"}}},
            "vip": {"schema": {"type": "boolean"}},
            "amount": {"schema": {"type": "number"}},
            "when": {"schema": {"type": "string", "format": "date"}},
            "profile": {
                "schema": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {"city": {"type": "string"}},
                }
            },
        },
        "context": {},
        "capabilities": ["structured_output"],
        "messages": [{"role": "user", "content": content}],
        "output_schema": {"type": "object"},
    }
    base.update(overrides)
    return base


def render(
    doc: dict[str, Any],
    inputs: dict[str, Any] | None = None,
    caps: tuple[str, ...] = ("structured_output",),
) -> tuple[str | None, list[str]]:
    text = yaml.safe_dump(doc)
    parsed, diagnostics = parse_contract(text)
    assert parsed is not None, diagnostics
    values = inputs or {"name": "Ann"}
    result = compile_contract(parsed, RenderRequest(inputs=values), caps)
    codes = [d.code for d in result.diagnostics]
    text = result.interaction.messages[0].content if result.interaction else None
    return text, codes


def ref(path: str) -> dict[str, str]:
    return {"kind": "ref", "path": path}


def test_reference_contracts_compile(reference_dir: Path) -> None:
    greeting = compile_contract(
        reference_dir / "demo" / "greeting.yaml",
        RenderRequest(inputs={"name": " Ryan "}, context={"organization": "Blinqx "}),
        ["structured_output", "zeta", "structured_output"],
    )
    assert greeting.interaction is not None
    assert greeting.interaction.messages[1].content == "Hello Ryan for Blinqx"
    assert greeting.interaction.compiler == COMPILER_ID == "templiqx-core/0.2.0"
    assert greeting.interaction.target_capabilities == ["structured_output", "zeta"]
    for name, request in [
        ("bli-61-date-term-extraction", "bli-61-request.json"),
        ("bli-62-document-drafting", "bli-62-request.json"),
    ]:
        render_request = RenderRequest.model_validate(
            read_json(reference_dir / "crm3" / "evals" / request)
        )
        result = compile_contract(
            reference_dir / "crm3" / "contracts" / f"{name}.yaml",
            render_request,
            ["structured_output"],
        )
        assert result.diagnostics == []
        assert result.interaction is not None
        assert result.interaction.required_capabilities == ["structured_output"]


def test_without_target_capabilities_a_contract_targets_what_it_declares() -> None:
    doc = contract([INTERP], capabilities=["structured_output", "vision"])
    parsed, _ = parse_contract(yaml.safe_dump(doc))
    assert parsed is not None
    request = RenderRequest(inputs={"name": "Ann"})
    implied = compile_contract(parsed, request)
    assert implied.interaction is not None
    assert implied.interaction.target_capabilities == ["structured_output", "vision"]
    assert implied == compile_contract(parsed, request, ["structured_output", "vision"])
    # Given, the targets are the caller's, even none at all.
    assert [d.code for d in compile_contract(parsed, request, []).diagnostics] == [
        "TQX_CAPABILITY_UNSUPPORTED",
        "TQX_CAPABILITY_UNSUPPORTED",
    ]


def test_bli61_with_scripted_runtime_gives_the_reference_output_fingerprint(
    reference_dir: Path,
) -> None:
    envelope = execute_contract(
        reference_dir / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml",
        RenderRequest.model_validate(read_json(reference_dir / "crm3/evals/bli-61-request.json")),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=["structured_output"],
        fixture_output=read_json(reference_dir / "crm3/evals/bli-61-output.json"),
    )
    assert envelope.ok
    assert envelope.fingerprints["output"] == (
        "66d6c3fbb03611b4b22deabbe9ef669e5ad69f59c1e90be4dee92d9c3a5188de"
    )


def test_filters_conditions_loops_and_expressions() -> None:
    content = [
        {"kind": "interpolate", "expression": ref("inputs.name"), "filters": ["upper"]},
        {
            "kind": "when",
            "condition": {
                "kind": "and",
                "values": [
                    ref("inputs.vip"),
                    {"kind": "not", "value": {"kind": "literal", "value": False}},
                ],
            },
            "then": [{"kind": "text", "value": " VIP"}],
            "else": [{"kind": "text", "value": " -"}],
        },
        {"kind": "text", "value": " ["},
        {
            "kind": "for_each",
            "collection": ref("inputs.tags"),
            "item": "tag",
            "separator": ",",
            "body": [{"kind": "interpolate", "expression": ref("tag"), "filters": ["trim"]}],
        },
        {"kind": "text", "value": "] "},
        {
            "kind": "interpolate",
            "expression": ref("inputs.amount"),
            "filters": [{"name": "format_number", "decimals": 2}],
        },
        {"kind": "text", "value": " "},
        {
            "kind": "interpolate",
            "expression": ref("inputs.when"),
            "filters": [{"name": "format_date", "format": "%d-%m-%Y"}],
        },
        {
            "kind": "when",
            "condition": {
                "kind": "or",
                "values": [
                    {
                        "kind": "equals",
                        "left": ref("inputs.name"),
                        "right": {"kind": "literal", "value": "Ann"},
                    },
                    ref("inputs.vip"),
                ],
            },
            "then": [{"kind": "text", "value": " hi Ann"}],
        },
        {"kind": "interpolate", "expression": ref("inputs.profile"), "filters": ["json"]},
    ]
    text, codes = render(
        contract(content),
        {
            "name": "ann",
            "vip": True,
            "tags": [" a ", "b"],
            "amount": 3.14159,
            "when": "2027-05-31",
            "profile": {"city": "Utrecht"},
        },
    )
    assert codes == []
    assert text == 'ANN VIP [a,b] 3.14 31-05-2027 hi Ann{"city":"Utrecht"}'


def test_typed_and_legacy_components() -> None:
    components = {
        "legacy": [
            {"kind": "text", "value": "L:"},
            {"kind": "interpolate", "expression": ref("who")},
        ],
        "typed": {
            "parameters": {"who": {"schema": {"type": "string"}, "required": True}},
            "content": [{"kind": "interpolate", "expression": ref("who"), "filters": ["lower"]}],
        },
    }
    content = [
        {"kind": "component", "name": "legacy", "with": {"who": ref("inputs.name")}},
        {"kind": "text", "value": "/"},
        {"kind": "component", "name": "typed", "with": {"who": ref("inputs.name")}},
    ]
    text, codes = render(contract(content, components=components), {"name": "Ann"})
    assert (text, codes) == ("L:Ann/ann", [])


def test_a_typo_in_a_typed_component_no_message_uses_is_ref_unknown() -> None:
    """An unused component is the branch never taken: its references still resolve against
    its parameters (as the reference's validate_contract checks every component)."""
    components = {
        "unused": {
            "parameters": {"who": {"schema": {"type": "string"}}},
            "content": [
                {"kind": "interpolate", "expression": ref("who"), "filters": [{"name": "default"}]},
                {"kind": "interpolate", "expression": ref("whom")},
            ],
        },
    }
    content = [{"kind": "text", "value": "hi"}]
    assert render(contract(content, components=components)) == (None, ["TQX_REF_UNKNOWN"])


def test_one_mistake_in_a_loop_body_is_one_diagnostic_not_one_per_item() -> None:
    loop = {
        "kind": "for_each",
        "collection": ref("inputs.tags"),
        "item": "tag",
        "body": [{"kind": "interpolate", "expression": ref("tag.x")}],  # a string has no x
    }
    assert render(contract([loop]), {"name": "a", "tags": ["a", "b", "c"]}) == (
        None,
        ["TQX_REF_UNKNOWN"],
    )


INTERP = {"kind": "interpolate", "expression": ref("inputs.name")}
TYPED = {
    "t": {
        "parameters": {"n": {"schema": {"type": "integer"}, "required": True}},
        "content": [{"kind": "text", "value": "x"}],
    }
}


@pytest.mark.parametrize(
    ("code", "content", "inputs", "overrides", "caps"),
    [
        ("TQX_VALUE_SCHEMA", [INTERP], {"name": 42}, {}, None),
        ("TQX_VALUE_REQUIRED", [INTERP], {"tags": ["x"]}, {}, None),  # required name missing
        ("TQX_VALUE_UNKNOWN", [INTERP], {"name": "a", "nickname": "b"}, {}, None),
        (
            "TQX_REF_UNKNOWN",
            [{"kind": "interpolate", "expression": ref("inputs.nope")}],
            None,
            {},
            None,
        ),
        (
            "TQX_REF_UNKNOWN",
            [{"kind": "interpolate", "expression": ref("inputs.profile.zip")}],
            None,
            {},
            None,
        ),
        (
            "TQX_REF_UNKNOWN",
            [{"kind": "interpolate", "expression": ref("inputs.vip")}],
            None,
            {},
            None,
        ),
        (
            "TQX_REF_UNKNOWN",
            [{"kind": "interpolate", "expression": ref("secrets.key")}],
            None,
            {},
            None,
        ),
        (
            "TQX_INTERPOLATION_TYPE",
            [{"kind": "interpolate", "expression": ref("inputs.tags")}],
            {"name": "a", "tags": []},
            {},
            None,
        ),
        (
            "TQX_FILTER_TYPE",
            [{"kind": "interpolate", "expression": ref("inputs.amount"), "filters": ["trim"]}],
            {"name": "a", "amount": 1},
            {},
            None,
        ),
        (
            "TQX_FILTER_TYPE",
            [{"kind": "interpolate", "expression": ref("inputs.name"), "filters": ["format_date"]}],
            {"name": "soon"},
            {},
            None,
        ),
        (
            "TQX_CONDITION_TYPE",
            [{"kind": "when", "condition": ref("inputs.name"), "then": []}],
            None,
            {},
            None,
        ),
        (
            "TQX_FOR_EACH_TYPE",
            [{"kind": "for_each", "collection": ref("inputs.name"), "item": "x", "body": []}],
            None,
            {},
            None,
        ),
        ("TQX_COMPONENT_MISSING", [{"kind": "component", "name": "ghost"}], None, {}, None),
        (
            "TQX_COMPONENT_ARGUMENT_MISSING",
            [{"kind": "component", "name": "t"}],
            None,
            {"components": TYPED},
            None,
        ),
        (
            "TQX_COMPONENT_ARGUMENT_UNKNOWN",
            [
                {
                    "kind": "component",
                    "name": "t",
                    "with": {
                        "n": {"kind": "literal", "value": 1},
                        "m": {"kind": "literal", "value": 2},
                    },
                }
            ],
            None,
            {"components": TYPED},
            None,
        ),
        (
            "TQX_COMPONENT_ARGUMENT_TYPE",
            [{"kind": "component", "name": "t", "with": {"n": ref("inputs.name")}}],
            None,
            {"components": TYPED},
            None,
        ),
        ("TQX_CAPABILITY_UNSUPPORTED", [INTERP], None, {}, ()),
        (
            "TQX_EXTENSION_NAMESPACE",
            [INTERP],
            None,
            {
                "extensions": {
                    "effort": {"capability": "structured_output", "schema": {}, "value": 1}
                }
            },
            None,
        ),
        (
            "TQX_EXTENSION_UNSUPPORTED",
            [INTERP],
            None,
            {
                "extensions": {
                    "openai.reasoning_effort": {
                        "capability": "reasoning",
                        "schema": {"type": "string"},
                        "value": "low",
                    }
                }
            },
            None,
        ),
        (
            "TQX_EXTENSION_SCHEMA",
            [INTERP],
            None,
            {
                "extensions": {
                    "openai.reasoning_effort": {
                        "capability": "structured_output",
                        "schema": {"enum": ["low"]},
                        "value": "max",
                    }
                }
            },
            None,
        ),
    ],
)
def test_each_diagnostic_code(
    code: str,
    content: list[Any],
    inputs: dict[str, Any] | None,
    overrides: dict[str, Any],
    caps: tuple[str, ...] | None,
) -> None:
    text, codes = render(
        contract(content, **overrides), inputs, ("structured_output",) if caps is None else caps
    )
    assert text is None
    assert code in codes


def test_untaken_branch_is_still_checked() -> None:
    content = [
        {
            "kind": "when",
            "condition": {"kind": "literal", "value": False},
            "then": [{"kind": "interpolate", "expression": ref("inputs.typo")}],
        }
    ]
    _, codes = render(contract(content))
    assert codes == ["TQX_REF_UNKNOWN"]


def test_diagnostics_carry_json_pointers() -> None:
    parsed, _ = parse_contract(
        yaml.safe_dump(
            contract(
                [
                    {"kind": "text", "value": "x"},
                    {"kind": "interpolate", "expression": ref("inputs.x")},
                ]
            )
        )
    )
    assert parsed is not None
    result = compile_contract(parsed, RenderRequest(inputs={"name": "a"}), ["structured_output"])
    assert result.diagnostics[0].json_pointer == "/messages/0/content/1/expression"


def test_extension_compiles_into_interaction_and_required_capabilities() -> None:
    doc = contract(
        [INTERP],
        capabilities=["structured_output", "structured_output"],
        extensions={
            "openai.reasoning_effort": {
                "capability": "reasoning",
                "schema": {"type": "string"},
                "value": "low",
            }
        },
    )
    parsed, _ = parse_contract(yaml.safe_dump(doc))
    assert parsed is not None
    result = compile_contract(
        parsed, RenderRequest(inputs={"name": "a"}), ["reasoning", "structured_output"]
    )
    assert result.interaction is not None
    assert result.interaction.extensions == {"openai.reasoning_effort": "low"}
    assert result.interaction.required_capabilities == ["reasoning", "structured_output"]


def test_yaml_syntax_error_has_line_and_column() -> None:
    parsed, diagnostics = parse_contract(
        "api_version: templiqx/v1alpha1\nid: [unclosed\n", file="c.yaml"
    )
    assert parsed is None
    (diagnostic,) = diagnostics
    assert diagnostic.code == "TQX_PARSE_YAML"
    assert diagnostic.file == "c.yaml"
    assert diagnostic.span is not None
    assert diagnostic.span.line >= 2


def test_unknown_field_and_enum_value_are_located() -> None:
    doc = contract([INTERP])
    doc["messages"][0]["role"] = "robot"
    doc["surprise"] = 1
    text = yaml.safe_dump(doc, sort_keys=False)
    parsed, diagnostics = parse_contract(text)
    assert parsed is None
    by_pointer = {d.json_pointer: d for d in diagnostics}
    assert set(by_pointer) >= {"/messages/0/role", "/surprise"}
    role_line = next(i for i, line in enumerate(text.splitlines(), 1) if "robot" in line)
    role = by_pointer["/messages/0/role"]
    assert role.span is not None
    assert role.span.line == role_line
    assert all(d.code == "TQX_PARSE_YAML" for d in diagnostics)


def test_duplicate_keys_are_rejected() -> None:
    parsed, diagnostics = parse_contract("id: a\nid: b\n")
    assert parsed is None
    assert "duplicate key" in diagnostics[0].message


@pytest.mark.parametrize("text", ["? [a, b]\n: 1\nid: x\n", "id: x\n? {a: 1}\n: 2\n"])
def test_a_sequence_or_mapping_as_a_key_is_a_located_diagnostic(text: str) -> None:
    parsed, diagnostics = parse_contract(text)
    assert parsed is None
    assert "unhashable key" in diagnostics[0].message
    assert diagnostics[0].span is not None


@pytest.mark.parametrize(
    ("node", "field"),
    [
        (
            {
                "kind": "for_each",
                "items": {"kind": "ref", "path": "inputs.tags"},
                "item": "t",
                "body": [],
            },
            "items",
        ),
        (
            {
                "kind": "when",
                "condition": {"kind": "not", "operand": {"kind": "literal", "value": True}},
                "then": [],
            },
            "operand",
        ),
        ({"kind": "when", "condition": {"kind": "and", "operands": []}, "then": []}, "operands"),
    ],
)
def test_node_fields_are_the_reference_s(node: dict[str, Any], field: str) -> None:
    # templiqx-contracts: ForEach {collection, item, body, separator}, Not {value},
    # And/Or {values}; any other field is rejected (deny_unknown_fields).
    parsed, diagnostics = parse_contract(yaml.safe_dump(contract([node])))
    assert parsed is None
    assert any(field in d.message for d in diagnostics), diagnostics
    empty_and = {"kind": "when", "condition": {"kind": "and", "values": []}, "then": []}
    accepted, _ = parse_contract(yaml.safe_dump(contract([empty_and])))
    assert accepted is not None  # serde accepts an empty Vec<Expr>


def test_value_and_capability_diagnostics_are_the_reference_s() -> None:
    # templiqx-core's validate_values and compile: declared fields in name order, then
    # undeclared values in name order (host `_templiqx_*` context keys skipped), then
    # capabilities in contract order, then extensions in name order; messages verbatim.
    doc = contract(
        [INTERP],
        capabilities=["structured_output", "vision"],
        context={"locale": {"schema": {"type": "string"}, "required": True}},
        extensions={
            "vendor.z": {"capability": "z_cap", "schema": {}, "value": 1},
            "vendor.a": {"capability": "a_cap", "schema": {}, "value": 1},
        },
    )
    parsed, _ = parse_contract(yaml.safe_dump(doc))
    assert parsed is not None
    request = RenderRequest(
        inputs={"zeta": 1, "alpha": 2},
        context={"_templiqx_authorized_merge": {}, "other": True},
    )
    result = compile_contract(parsed, request, ["structured_output"])
    assert [(d.code, d.message, d.json_pointer) for d in result.diagnostics] == [
        ("TQX_VALUE_REQUIRED", "required inputs value 'name' is missing", "/inputs/name"),
        ("TQX_VALUE_UNKNOWN", "undeclared inputs value 'alpha'", "/inputs/alpha"),
        ("TQX_VALUE_UNKNOWN", "undeclared inputs value 'zeta'", "/inputs/zeta"),
        ("TQX_VALUE_REQUIRED", "required context value 'locale' is missing", "/context/locale"),
        ("TQX_VALUE_UNKNOWN", "undeclared context value 'other'", "/context/other"),
        (
            "TQX_CAPABILITY_UNSUPPORTED",
            "target lacks required capability 'vision'",
            "/capabilities",
        ),
        (
            "TQX_EXTENSION_UNSUPPORTED",
            "target lacks capability 'a_cap' required by extension 'vendor.a'",
            "/extensions/vendor.a",
        ),
        (
            "TQX_EXTENSION_UNSUPPORTED",
            "target lacks capability 'z_cap' required by extension 'vendor.z'",
            "/extensions/vendor.z",
        ),
    ]


def exists(path: str) -> dict[str, str]:
    return {"kind": "exists", "path": path}


def default(value: Any = None) -> dict[str, Any]:
    return {"name": "default"} if value is None else {"name": "default", "value": value}


@pytest.mark.parametrize(
    ("inputs", "expected"),
    [
        ({"name": "Ann"}, "absent|-|"),  # left out
        ({"name": "Ann", "vip": None, "amount": None, "profile": {}}, "absent|-|"),  # null
        ({"name": "Ann", "vip": False, "amount": 0, "profile": {"city": ""}}, "there|0|"),
        (
            {"name": "Ann", "vip": True, "amount": 2.5, "profile": {"city": "Oslo"}},
            "there|2.5|Oslo",
        ),
    ],
)
def test_optional_values_read_through_exists_and_default(
    inputs: dict[str, Any], expected: str
) -> None:
    """Present falsy values (false, 0, "") are values: only absent or null ones are defaulted."""
    content = [
        {
            "kind": "when",
            "condition": exists("inputs.vip"),
            "then": [{"kind": "text", "value": "there"}],
            "else": [{"kind": "text", "value": "absent"}],
        },
        {"kind": "text", "value": "|"},
        {"kind": "interpolate", "expression": ref("inputs.amount"), "filters": [default("-")]},
        {"kind": "text", "value": "|"},
        {"kind": "interpolate", "expression": ref("inputs.profile.city"), "filters": [default()]},
    ]
    doc = contract(content)
    for name in ("vip", "amount"):  # as a typed contract's ``X | None`` field declares them
        doc["inputs"][name]["schema"]["type"] = [doc["inputs"][name]["schema"]["type"], "null"]
    assert render(doc, inputs) == (expected, [])


def test_an_untaken_branch_may_name_an_absent_value_but_not_an_undeclared_one() -> None:
    guarded = {
        "kind": "when",
        "condition": exists("inputs.profile.city"),
        "then": [{"kind": "interpolate", "expression": ref("inputs.profile.city")}],
        "else": [{"kind": "text", "value": "nowhere"}],
    }
    assert render(contract([guarded]), {"name": "Ann", "profile": {}}) == ("nowhere", [])
    typo = {**guarded, "then": [{"kind": "interpolate", "expression": ref("inputs.profile.town")}]}
    assert render(contract([typo]), {"name": "Ann", "profile": {}})[1] == ["TQX_REF_UNKNOWN"]
    unknown = {**guarded, "condition": exists("inputs.profile.town")}
    assert render(contract([unknown]), {"name": "Ann", "profile": {}})[1] == ["TQX_REF_UNKNOWN"]


@pytest.mark.parametrize(
    ("filters", "code"),
    [
        ([], "TQX_REF_UNKNOWN"),  # an absent value read without default
        (["upper", default("x")], "TQX_REF_UNKNOWN"),  # default must come first
        ([default({"a": 1})], "TQX_INTERPOLATION_TYPE"),  # an object still needs json
    ],
)
def test_an_absent_value_without_a_usable_default_is_an_error(
    filters: list[Any], code: str
) -> None:
    node = {"kind": "interpolate", "expression": ref("inputs.profile.city"), "filters": filters}
    assert render(contract([node]), {"name": "Ann", "profile": {}})[1] == [code]


@pytest.mark.parametrize(
    ("decimals", "expected"), [(2, "1" + "0" * 400 + ".00"), (0, "1" + "0" * 400)]
)
def test_format_number_writes_an_integer_too_large_for_a_float(
    decimals: int, expected: str
) -> None:
    """JSON holds it (a default's value or a request's); before, OverflowError: exit 1."""
    node = {
        "kind": "interpolate",
        "expression": ref("inputs.amount"),
        "filters": [{"name": "format_number", "decimals": decimals}],
    }
    assert render(contract([node]), {"name": "Ann", "amount": 10**400}) == (expected, [])
