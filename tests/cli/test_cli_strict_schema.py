"""``templiqx check`` reports where an output schema is outside OpenAI's structured-outputs
subset: warnings (exit 0), or with ``--strict-schema`` errors where no strict form exists."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.conftest import Run
from tests.conftest import REFERENCE

OPEN_SCHEMA = """\
api_version: templiqx/v1alpha1
id: open-answer
version: 1.0.0
messages:
  - role: user
    content:
      - kind: text
        value: "Answer in JSON."
output_schema:
  type: object
  additionalProperties: false
  required: [answer, extra]
  properties:
    answer: {type: string, minLength: 1}
    extra: {type: object}
"""


def test_plain_check_warns_and_exits_zero(run_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "open.yaml"
    path.write_text(OPEN_SCHEMA)
    result = run_cli("check", str(path), "--json")
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["ok"] is True
    assert envelope["result"]["contract_id"] == "open-answer"
    found = [(d["code"], d["severity"], d["json_pointer"]) for d in envelope["diagnostics"]]
    assert found == [
        ("TQX_OUTPUT_SCHEMA_STRICT", "warning", "/output_schema/properties/answer/minLength"),
        ("TQX_OUTPUT_SCHEMA_STRICT", "warning", "/output_schema/properties/extra"),
    ]
    warnings = [line for line in result.stderr.splitlines() if "warning:" in line]
    assert len(warnings) == 2


def test_strict_schema_makes_a_schema_without_strict_form_an_error(
    run_cli: Run, tmp_path: Path
) -> None:
    path = tmp_path / "open.yaml"
    path.write_text(OPEN_SCHEMA)
    result = run_cli("check", str(path), "--strict-schema", "--json")
    assert result.returncode == 2
    envelope = json.loads(result.stdout)
    assert envelope["ok"] is False
    errors = [d for d in envelope["diagnostics"] if d["severity"] == "error"]
    assert [d["json_pointer"] for d in errors] == ["/output_schema/properties/extra"]
    assert "no strict form" in errors[0]["message"]
    lines = result.stderr.splitlines()
    assert [line.split(" TQX_")[0] for line in lines] == [
        "templiqx: warning:",  # minLength: fixable, stays a warning, said once
        "templiqx: check_contract failed:",
    ]
    assert "/output_schema/properties/extra" in lines[1]


def test_a_reference_contract_with_a_strict_form_passes_strict_schema(run_cli: Run) -> None:
    contract = REFERENCE / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml"
    result = run_cli("check", str(contract), "--strict-schema", "--json")
    assert result.returncode == 0, result.stderr
    severities = {d["severity"] for d in json.loads(result.stdout)["diagnostics"]}
    assert severities == {"warning"}  # minLength/maxLength: left out of what is sent
