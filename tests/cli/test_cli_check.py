"""``templiqx check`` and ``execute --eval``: a contract and its eval fixtures checked
without a request, and an eval run with its own inputs, context and fake output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cli.conftest import Run
from tests.conftest import REFERENCE

TRIAGE = """\
api_version: templiqx/v1alpha1
id: triage-ticket
version: 1.0.0
inputs:
  subject:
    required: true
    schema: {type: string, minLength: 1}
  priority:
    required: true
    schema: {enum: [1, 2, 3]}
messages:
  - role: user
    content:
      - kind: text
        value: "Triage: "
      - kind: interpolate
        expression: {kind: ref, path: inputs.subject}
output_schema:
  type: object
  additionalProperties: false
  required: [category, priority]
  properties:
    category: {enum: [billing, bug, other]}
    priority: {enum: [1, 2, 3]}
evals:
  - id: crash
    inputs: {subject: App crashes on login, priority: 1}
    fake_output: {category: bug, priority: 1}
"""


@pytest.fixture
def triage(tmp_path: Path) -> Path:
    path = tmp_path / "triage.yaml"
    path.write_text(TRIAGE)
    return path


def with_eval(path: Path, case: str) -> Path:
    path.write_text(TRIAGE + case)
    return path


def stderr_lines(result_stderr: str) -> list[str]:
    return [line for line in result_stderr.splitlines() if line.startswith("templiqx:")]


def test_check_of_a_sound_contract_is_ok_and_counts_its_evals(run_cli: Run, triage: Path) -> None:
    result = run_cli("check", str(triage), "--json")
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["operation"] == "check_contract"
    assert envelope["result"] == {
        "contract_id": "triage-ticket",
        "contract_version": "1.0.0",
        "evals": 1,
    }


def test_check_of_a_reference_contract_with_evals_is_ok(run_cli: Run) -> None:
    contract = REFERENCE / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml"
    result = run_cli("check", str(contract), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ok"] is True


def test_check_names_each_broken_eval_fixture_rule_in_envelope_and_stderr(
    run_cli: Run, triage: Path
) -> None:
    case = """\
  - id: broken
    inputs: {subject: "", priority: 7}
    fake_output: {category: crash, priority: 1}
"""
    result = run_cli("check", str(with_eval(triage, case)), "--json")
    assert result.returncode == 2
    diagnostics = json.loads(result.stdout)["diagnostics"]
    assert [(d["code"], d["json_pointer"], d["message"]) for d in diagnostics] == [
        (
            "TQX_VALUE_SCHEMA",
            "/evals/1/inputs/priority",
            "eval 'broken': /priority: fails enum [1, 2, 3]",
        ),
        (
            "TQX_VALUE_SCHEMA",
            "/evals/1/inputs/subject",
            "eval 'broken': /subject: fails minLength 1",
        ),
        (
            "TQX_OUTPUT_SCHEMA",
            "/evals/1/fake_output/category",
            'eval \'broken\': /category: fails enum ["billing", "bug", "other"]',
        ),
    ]
    # The stderr line carries the envelope's text, one line per diagnostic.
    assert stderr_lines(result.stderr) == [
        f"templiqx: check_contract failed: {d['code']} {triage} {d['json_pointer']}: {d['message']}"
        for d in diagnostics
    ]


def test_check_reports_a_contract_error_that_needs_no_inputs(run_cli: Run, triage: Path) -> None:
    triage.write_text(TRIAGE.replace("path: inputs.subject", "path: inputs.subjet"))
    result = run_cli("check", str(triage), "--json")
    assert result.returncode == 2
    codes = [d["code"] for d in json.loads(result.stdout)["diagnostics"]]
    assert codes == ["TQX_REF_UNKNOWN"]  # once, not again for the eval that hits it too


def test_check_of_an_unparsable_contract_is_located(run_cli: Run, triage: Path) -> None:
    triage.write_text(TRIAGE.replace("messages:", "mesages:"))
    result = run_cli("check", str(triage), "--json")
    assert result.returncode == 2
    assert json.loads(result.stdout)["ok"] is False
    assert "Traceback" not in result.stderr


def test_a_diagnostic_line_says_its_pointer_once(run_cli: Run, tmp_path: Path) -> None:
    path = tmp_path / "mixed.yaml"  # a string in a node list: the message starts with its pointer
    text = "      - kind: text\n"
    path.write_text(TRIAGE.replace(text, f"      - plain\n{text}", 1))
    (line,) = stderr_lines(run_cli("check", str(path)).stderr)
    assert line.count("/messages/0/content") == 1, line


def test_execute_eval_uses_the_eval_fake_output_on_the_scripted_runtime(
    run_cli: Run, triage: Path
) -> None:
    result = run_cli("execute", str(triage), "--eval", "crash", "--runtime", "scripted", "--json")
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["result"]["output"] == {"category": "bug", "priority": 1}
    assert envelope["result"]["output_schema_valid"] is True


def test_execute_eval_alone_selects_the_scripted_runtime(run_cli: Run, triage: Path) -> None:
    result = run_cli("execute", str(triage), "--eval", "crash", "--json")
    assert result.returncode == 0, result.stderr


def test_execute_eval_with_invalid_fake_output_names_the_rule(run_cli: Run, triage: Path) -> None:
    case = """\
  - id: wrong
    inputs: {subject: Refund please, priority: 2}
    fake_output: {category: refund, priority: 2}
"""
    path = with_eval(triage, case)
    result = run_cli("execute", str(path), "--eval", "wrong", "--runtime", "scripted", "--json")
    assert result.returncode == 2
    assert stderr_lines(result.stderr) == [
        "templiqx: execute_contract failed: TQX_OUTPUT_SCHEMA /output: "
        "runtime output does not satisfy the contract schema",
        "templiqx: execute_contract failed: TQX_OUTPUT_SCHEMA /output/category: "
        '/category: fails enum ["billing", "bug", "other"]',
    ]


SHAPE_ERRORS = [  # (edit of TRIAGE, pointer, rule): each a TQX_PARSE_YAML from the model
    (("role: user", "role: robot"), "/messages/0/role", "Input should be 'system'"),
    (("version: 1.0.0", "version: 1"), "/version", "Input should be a valid string"),
    (("evals:", "ouput_schema: {}\nevals:"), "/ouput_schema", "Extra inputs are not permitted"),
    (('        value: "Triage: "\n', ""), "/messages/0/content/0/value", "Field required"),
    (
        ("path: inputs.subject}", "path: inputs.subject}\n        filters: [{decimals: 2.0}]"),
        "/messages/0/content/1/filters/0/decimals",  # inside a node: no union tag in it
        "Input should be a valid integer",
    ),
    (
        ("    fake_output: {category: bug, priority: 1}\n", ""),
        "/evals/0/fake_output",
        "Field required",
    ),
]


@pytest.mark.parametrize(
    ("edit", "pointer", "rule"), SHAPE_ERRORS, ids=[p for _, p, _ in SHAPE_ERRORS]
)
def test_a_shape_error_is_a_located_diagnostic_naming_the_rule(
    run_cli: Run, triage: Path, edit: tuple[str, str], pointer: str, rule: str
) -> None:
    assert edit[0] in TRIAGE
    triage.write_text(TRIAGE.replace(*edit))
    for command in ("check", "compile"):
        result = run_cli(command, str(triage), "--json")
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert "internal error" not in result.stderr
        diagnostics = json.loads(result.stdout)["diagnostics"]
        assert {d["code"] for d in diagnostics} == {"TQX_PARSE_YAML"}
        found = [d for d in diagnostics if d["json_pointer"] == pointer]
        assert len(found) == 1, diagnostics
        assert found[0]["message"].startswith(f"{pointer}: {rule}")
        assert found[0]["span"] is not None  # and the line and column in the file
