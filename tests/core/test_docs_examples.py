"""Every example of the contract language reference compiles as the page says.

``docs/contracts.md``: a ``yaml`` block starting with ``api_version:`` is a contract that
must pass ``check`` and all its evals; the ``text`` block right after it is what its
first eval compiles to (``role: content`` per message); a block whose first line is
``# expect: CODE[, CODE]`` must fail ``check`` with exactly those codes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import jsonschema_rs
import pytest
import yaml

from templiqx_core import (
    CONTRACT_SCHEMA_PATH,
    RenderRequest,
    check_envelope,
    codes,
    compile_contract,
)
from templiqx_core._application import eval_envelope
from templiqx_core._compiler import read_contract
from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "contracts.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
EXPECT = re.compile(r"^# expect: (.+)$")


@dataclass(frozen=True)
class Example:
    index: int
    source: str
    rendered: str | None  # the text block that follows, if any
    expected_codes: list[str] | None

    @property
    def id(self) -> str:
        found = re.search(r"^id: (\S+)$", self.source, re.MULTILINE)
        return f"{self.index}-{found.group(1) if found else 'contract'}"


def examples() -> list[Example]:
    blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(DOC.read_text("utf-8"))]
    found = []
    for position, (language, body) in enumerate(blocks):
        if language != "yaml":
            continue
        first = body.splitlines()[0]
        expect = EXPECT.match(first)
        if not (expect or first.startswith("api_version:")):
            continue
        following = blocks[position + 1] if position + 1 < len(blocks) else None
        rendered = following[1] if following and following[0] == "text" else None
        codes = [c.strip() for c in expect.group(1).split(",")] if expect else None
        found.append(Example(len(found), body, rendered, codes))
    return found


EXAMPLES = examples()


def write(example: Example, tmp_path: Path) -> Path:
    path = tmp_path / f"{example.id}.yaml"
    path.write_text(example.source, encoding="utf-8")
    return path


def test_the_reference_has_an_example_for_every_node_kind_and_expression() -> None:
    text = "\n".join(e.source for e in EXAMPLES if e.expected_codes is None)
    for kind in ("text", "interpolate", "when", "for_each", "component"):
        assert f"kind: {kind}" in text, kind
    for kind in ("ref", "literal", "equals", "not", "and", "or"):
        assert f"kind: {kind}" in text, kind
    for name in ("trim", "lower", "upper", "json", "format_date", "format_number"):
        assert name in text, name
    for field in ("capabilities:", "runtime_policy:", "extensions:", "components:", "evals:"):
        assert field in text, field
    assert len([e for e in EXAMPLES if e.rendered is not None]) >= 12


@pytest.mark.parametrize(
    "example", [e for e in EXAMPLES if e.expected_codes is None], ids=lambda e: e.id
)
def test_every_example_checks_and_its_evals_pass(example: Example, tmp_path: Path) -> None:
    path = write(example, tmp_path)
    envelope = check_envelope(path)
    assert envelope.ok, [d.to_json() for d in envelope.diagnostics]
    report = eval_envelope(path).result
    assert report is not None
    assert [case.fixture_id for case in report.cases if not case.passed] == []


@pytest.mark.parametrize(
    "example", [e for e in EXAMPLES if e.rendered is not None], ids=lambda e: e.id
)
def test_every_example_compiles_to_the_text_shown(example: Example, tmp_path: Path) -> None:
    path = write(example, tmp_path)
    contract, _ = read_contract(path)
    assert contract is not None
    assert contract.evals, "a rendered example needs an eval"
    case = contract.evals[0]
    result = compile_contract(
        contract,
        RenderRequest(inputs=case.inputs, context=case.context),
        contract.declared_capabilities,
    )
    assert result.interaction is not None, result.diagnostics
    shown = "\n".join(f"{m.role}: {m.content}" for m in result.interaction.messages)
    assert shown + "\n" == example.rendered


@pytest.mark.parametrize(
    "example", [e for e in EXAMPLES if e.expected_codes is not None], ids=lambda e: e.id
)
def test_every_broken_example_fails_check_with_the_codes_shown(
    example: Example, tmp_path: Path
) -> None:
    envelope = check_envelope(write(example, tmp_path))
    assert not envelope.ok
    assert [d.code for d in envelope.diagnostics] == example.expected_codes


def test_the_shipped_json_schema_accepts_every_example_and_refuses_a_typo() -> None:
    validator = jsonschema_rs.Draft202012Validator(
        json.loads(CONTRACT_SCHEMA_PATH.read_text(encoding="utf-8"))
    )
    for example in EXAMPLES:  # a shape error fails the schema as it fails the model
        shape_error = example.expected_codes == [codes.PARSE_YAML]
        assert validator.is_valid(yaml.safe_load(example.source)) != shape_error, example.id
    typo = yaml.safe_load(EXAMPLES[0].source) | {"mesages": []}
    assert not validator.is_valid(typo)


def test_the_readme_links_the_reference() -> None:
    assert "(docs/contracts.md)" in (REPO_ROOT / "README.md").read_text(encoding="utf-8")
