"""A typed contract's ``to_yaml()`` through the real CLI (compile, check, eval, execute):
the same interaction and request fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

from templiqx_core import ExecutionReceipt
from templiqx_core._receipts import request_fingerprint
from tests.cli.conftest import Run
from tests.langfuse.test_typed_contracts_loopback import TYPED, Ticket


def test_to_yaml_compiles_through_the_cli_to_the_same_fingerprint(
    run_cli: Run, tmp_path: Path
) -> None:
    contract, inputs = tmp_path / "triage.yaml", tmp_path / "inputs.json"
    contract.write_text(TYPED.to_yaml(), encoding="utf-8")
    inputs.write_text(json.dumps({"subject": "Site down", "tier": "pro"}), encoding="utf-8")
    compiled = run_cli("compile", str(contract), "--inputs", str(inputs))
    assert compiled.returncode == 0, compiled.stderr
    interaction = TYPED.compile(Ticket(subject="Site down", tier="pro"))
    envelope = json.loads(compiled.stdout)
    assert envelope["result"] == interaction.to_json()
    assert run_cli("check", str(contract)).returncode == 0
    evaluated = run_cli("eval", str(contract))
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["result"]["passed"] == 1
    executed = run_cli("execute", str(contract), "--eval", "outage")
    assert executed.returncode == 0, executed.stderr
    receipt = json.loads(executed.stdout)["result"]
    assert receipt["request_fingerprint"] == request_fingerprint(interaction)
    assert TYPED.output_of(ExecutionReceipt.model_validate(receipt)).summary == "down"
