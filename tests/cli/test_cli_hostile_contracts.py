"""Hostile contracts and request values: typed diagnostics, never an internal error.

Each case once failed as ``internal error (ValueError/RecursionError/UnicodeEncodeError)``
or as an exit-1 ``TQX_DATA_INVALID`` where an invalid inputs schema gets the exit-2
envelope; the CLI runs as a real subprocess, the library through ``compile_contract``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from templiqx_core import RenderRequest, codes, compile_contract
from templiqx_core._canonical import MAX_DEPTH
from templiqx_core._compiler import Contract
from tests.cli.conftest import Run
from tests.conftest import REPO_ROOT

GREETING = REPO_ROOT / "reference" / "demo" / "greeting.yaml"  # with a component
DIGITS = sys.get_int_max_str_digits() + 1
INPUTS = {"name": "Ryan"}
CONTEXT = {"organization": "Blinqx"}


def greeting(**changes: Any) -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(GREETING.read_text(encoding="utf-8"))
    document.update(changes)
    return document


def nested_policy_yaml(levels: int) -> str:
    """The greeting with ``runtime_policy.x`` nested so the document has ``levels`` containers."""
    text = GREETING.read_text(encoding="utf-8")
    inner = levels - 2  # the document's mapping and runtime_policy's
    deep = "[" * inner + "]" * inner
    return text.replace("runtime_policy:\n", f"runtime_policy:\n  x: {deep}\n", 1)


def bad_parameter_schema() -> dict[str, Any]:
    document = greeting()
    content = document["components"]["salutation"]
    parameter = {"schema": {"type": 5}, "required": True}
    document["components"]["salutation"] = {
        "parameters": {"recipient": parameter},
        "content": content,
    }
    return document


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def values(tmp_path: Path, inputs: str = json.dumps(INPUTS)) -> list[str]:
    return [
        "--inputs",
        str(write(tmp_path, "inputs.json", inputs)),
        "--context",
        str(write(tmp_path, "context.json", json.dumps(CONTEXT))),
    ]


def assert_typed(result: Any, exit_code: int, *needles: str) -> None:
    assert result.returncode == exit_code, result.stderr
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.stderr
    for needle in needles:
        assert needle in result.stderr


# -- (a) integers beyond Python's digit limit -----------------------------------------


def test_huge_integer_in_a_contract_is_a_parse_diagnostic(run_cli: Run, tmp_path: Path) -> None:
    text = GREETING.read_text(encoding="utf-8").replace(
        "runtime_policy:\n", f"runtime_policy:\n  seed: {'9' * DIGITS}\n", 1
    )
    contract = write(tmp_path, "seed.yaml", text)
    result = run_cli("compile", str(contract), *values(tmp_path))
    assert_typed(result, 2, codes.PARSE_YAML, "seed.yaml", "digits")
    (diagnostic,) = compile_contract(contract, RenderRequest(), []).diagnostics
    assert diagnostic.code == codes.PARSE_YAML


@pytest.mark.parametrize("command", ["compile", "fingerprint"])
def test_huge_integer_in_a_json_document_is_invalid_data(
    command: str, run_cli: Run, tmp_path: Path
) -> None:
    inputs = '{\n  "name": ' + "9" * DIGITS + "\n}"
    if command == "fingerprint":
        args = ["fingerprint", str(write(tmp_path, "inputs.json", inputs))]
    else:
        args = ["compile", str(GREETING), *values(tmp_path, inputs)]
    result = run_cli(*args)
    assert_typed(result, 1, "inputs.json: invalid JSON", "digits")


# -- (b) nesting between the interpreter's recursion limit and libyaml's -------------


@pytest.mark.parametrize("levels", [300, MAX_DEPTH + 1, 999])
def test_deep_contracts_are_parse_diagnostics(levels: int, run_cli: Run, tmp_path: Path) -> None:
    contract = write(tmp_path, "deep.yaml", nested_policy_yaml(levels))
    result = compile_contract(contract, RenderRequest(inputs=INPUTS, context=CONTEXT), [])
    assert result.interaction is None
    assert {d.code for d in result.diagnostics} == {codes.PARSE_YAML}
    if levels > MAX_DEPTH:
        assert f"nested deeper than {MAX_DEPTH} levels" in result.diagnostics[0].message
        cli = run_cli("compile", str(contract), *values(tmp_path))
        assert_typed(cli, 2, codes.PARSE_YAML, f"nested deeper than {MAX_DEPTH} levels")


def test_yaml_documents_nest_as_deep_as_canonical_json_allows(run_cli: Run, tmp_path: Path) -> None:
    deep = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert run_cli("fingerprint", str(write(tmp_path, "ok.yaml", deep))).returncode == 0
    deeper = "[" + deep + "]"
    result = run_cli("fingerprint", str(write(tmp_path, "deep.yaml", deeper)))
    assert_typed(result, 1, "invalid YAML at line 1 column 1", f"deeper than {MAX_DEPTH}")


# -- (c) a lone surrogate in request values ----------------------------------------


@pytest.mark.parametrize("command", ["compile", "execute"])
def test_lone_surrogate_input_is_invalid_data_at_its_pointer(
    command: str, run_cli: Run, tmp_path: Path
) -> None:
    args = [command, str(GREETING), *values(tmp_path, '{"name": "\\ud800"}'), "--json"]
    if command == "execute":
        fixture = write(tmp_path, "out.json", '{"greeting": "hi"}')
        args += ["--fixture-output", str(fixture)]
    result = run_cli(*args)
    assert_typed(result, 2, codes.DATA_INVALID)
    (diagnostic,) = json.loads(result.stdout)["diagnostics"]
    assert (diagnostic["code"], diagnostic["json_pointer"]) == (codes.DATA_INVALID, "/inputs/name")


def test_lone_surrogate_value_through_compile_contract() -> None:
    request = RenderRequest(inputs={"name": "\ud800"}, context=CONTEXT)
    for contract in (GREETING, Contract.model_validate(greeting())):
        found = compile_contract(contract, request, ["structured_output"])
        (diagnostic,) = found.diagnostics
        assert diagnostic.code == codes.DATA_INVALID
        assert diagnostic.json_pointer == "/inputs/name"


# -- (d) a typed component parameter with an invalid schema ------------------------


def test_invalid_parameter_schema_is_an_envelope_diagnostic(run_cli: Run, tmp_path: Path) -> None:
    document = bad_parameter_schema()
    pointer = "/components/salutation/parameters/recipient/schema"
    contract = write(tmp_path, "param.yaml", yaml.safe_dump(document))
    result = run_cli("compile", str(contract), *values(tmp_path), "--json")
    assert_typed(result, 2, codes.VALUE_SCHEMA, pointer)
    (diagnostic,) = json.loads(result.stdout)["diagnostics"]
    assert diagnostic["json_pointer"] == pointer
    request = RenderRequest(inputs=INPUTS, context=CONTEXT)
    for source in (contract, Contract.model_validate(document)):
        (found,) = compile_contract(source, request, ["structured_output"]).diagnostics
        assert (found.code, found.json_pointer) == (codes.VALUE_SCHEMA, pointer)


def test_unhashable_schema_types_are_schema_diagnostics(tmp_path: Path) -> None:
    """``type: [{}]`` is no JSON Schema; static resolution must not trip over it."""
    document = greeting()
    document["inputs"]["name"]["schema"] = {"type": [{}]}
    parameter_doc = bad_parameter_schema()
    parameter_doc["components"]["salutation"]["parameters"]["recipient"]["schema"] = {"type": [{}]}
    request = RenderRequest(inputs=INPUTS, context=CONTEXT)
    for doc, pointer in (
        (document, "/inputs/name"),
        (parameter_doc, "/components/salutation/parameters/recipient/schema"),
    ):
        file = write(tmp_path, "contract.yaml", yaml.safe_dump(doc))
        for source in (file, Contract.model_validate(doc)):
            found = compile_contract(source, request, ["structured_output"])
            assert [(d.code, d.json_pointer) for d in found.diagnostics] == [
                (codes.VALUE_SCHEMA, pointer)
            ]
