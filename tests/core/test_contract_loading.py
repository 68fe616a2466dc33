"""A contract file is parsed once (libyaml when PyYAML has it), and a CLI run reads it once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from templiqx_core._compiler import parse_contract
from templiqx_core._loading import UniqueKeyLoader
from tests.conftest import REFERENCE

BLI61 = REFERENCE / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml"


@pytest.mark.skipif(not yaml.__with_libyaml__, reason="PyYAML built without libyaml")
def test_the_loader_is_libyamls_when_available() -> None:
    assert issubclass(UniqueKeyLoader, yaml.CSafeLoader)


@pytest.fixture
def loaders(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    made: list[str] = []
    original = UniqueKeyLoader.__init__

    def counting(self: UniqueKeyLoader, stream: Any) -> None:
        made.append("loader")
        original(self, stream)

    monkeypatch.setattr(UniqueKeyLoader, "__init__", counting)
    return made


def test_a_contract_is_parsed_once(loaders: list[str]) -> None:
    contract, diagnostics = parse_contract(BLI61.read_text(encoding="utf-8"))
    assert contract is not None
    assert diagnostics == []
    assert loaders == ["loader"]


def test_structure_errors_still_carry_their_line(loaders: list[str]) -> None:
    text = BLI61.read_text(encoding="utf-8").replace("role: system", "role: sistem", 1)
    line = next(i for i, row in enumerate(text.splitlines(), 1) if "role: sistem" in row)
    _, diagnostics = parse_contract(text)
    assert len(loaders) == 1
    assert any(d.span is not None and d.span.line == line for d in diagnostics), diagnostics


def test_exponent_numbers_read_as_json_and_yaml_1_2_write_them(tmp_path: Path) -> None:
    """YAML 1.1 reads ``1e-05`` and ``1.5e3`` as strings: a JSON-written contract's
    ``multipleOf`` would be an invalid schema. They are floats, as the reference reads them;
    quoted, they stay strings, and a typed contract's YAML quotes such strings."""
    text = (
        '{"api_version": "templiqx/v1alpha1", "id": "j", "version": "1e3",'
        ' "inputs": {"x": {"schema": {"type": "number", "multipleOf": 1e-05, "maximum": 1.5e3},'
        ' "required": true}}, "messages": [{"role": "user", "content": "x={{ inputs.x }}"}],'
        ' "output_schema": {"type": "object"}}'
    )
    contract, diagnostics = parse_contract(text)
    assert contract is not None, diagnostics
    assert contract.version == "1e3"
    assert contract.inputs["x"].schema_["multipleOf"] == 1e-05
    assert contract.inputs["x"].schema_["maximum"] == 1500.0
    assert yaml.load("[1e-05, -2E+2, .5e1, '1e3', 1e, 1_0e3]", Loader=UniqueKeyLoader) == [
        1e-05, -200.0, 5.0, "1e3", "1e", "1_0e3"
    ]  # fmt: skip


def test_a_value_a_yaml_constructor_refuses_is_a_parse_diagnostic() -> None:
    """PyYAML's constructors raise ValueError (a 2020-13-45 date): a diagnostic, not a crash."""
    contract, diagnostics = parse_contract("a: 2020-13-45\n")
    assert contract is None
    assert [(d.code, d.message) for d in diagnostics] == [
        ("TQX_PARSE_YAML", "invalid YAML: month must be in 1..12")
    ]
