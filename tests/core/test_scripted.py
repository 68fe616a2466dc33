from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from templiqx_core import (
    CompiledInteraction,
    DeltaEvent,
    ExecutionRequest,
    InvalidData,
    RenderRequest,
    RuntimeFailureCode,
    RuntimeFailureError,
    ScriptedFailure,
    ScriptedRuntime,
    ScriptedSuccess,
    StreamEvent,
    fingerprint,
    load_inventory,
    load_scenario,
)
from templiqx_core._application import execute_contract
from templiqx_core.conformance import check_adapter
from tests.conftest import read_json

INVENTORY = Path("crm3") / "scenarios" / "inventory.json"
CONTRACTS = {
    "bli-61-date-term-extraction": "bli-61-date-term-extraction.yaml",
    "bli-62-document-drafting": "bli-62-document-drafting.yaml",
}


def test_every_reference_scenario_produces_its_expectation(reference_dir: Path) -> None:
    inventory = read_json(reference_dir / INVENTORY)
    expectations = {entry["id"]: entry["expectation"] for entry in inventory["scenarios"]}
    scenarios = load_inventory(reference_dir / INVENTORY)
    assert sorted(s.id for s in scenarios) == sorted(expectations)
    for scenario in scenarios:
        contract = reference_dir / "crm3" / "contracts" / CONTRACTS[scenario.manifest.contract]
        runtime = ScriptedRuntime.from_scenario(scenario)
        envelope = execute_contract(
            contract, scenario.render_request, runtime=runtime, capabilities=["structured_output"]
        )
        expect = expectations[scenario.id]
        codes = [d.code for d in envelope.diagnostics]
        assert ("success" if envelope.ok else "failure") == expect["status"], scenario.id
        assert codes == ([] if expect["diagnostic_code"] is None else [expect["diagnostic_code"]])
        if expect["status"] == "success":
            assert envelope.fingerprints["output"] == expect["output_fingerprint"]
        if expect["output_schema_valid"] is not None:
            assert envelope.result is not None
            assert envelope.result.output_schema_valid is expect["output_schema_valid"]
        if envelope.diagnostics and envelope.diagnostics[0].code.startswith("TQX_RUNTIME"):
            assert f"scenario={scenario.id}" in (envelope.diagnostics[0].help or "")


def test_inventory_fails_closed_when_an_expectation_disagrees(
    reference_dir: Path, tmp_path: Path
) -> None:
    root = tmp_path / "reference"
    shutil.copytree(reference_dir / "crm3", root / "crm3")
    path = root / INVENTORY
    inventory = read_json(path)
    inventory["scenarios"][0]["expectation"]["diagnostic_code"] = "TQX_RUNTIME_TIMEOUT"
    path.write_text(json.dumps(inventory))
    with pytest.raises(InvalidData, match="ambiguous-date: diagnostic_code"):
        load_inventory(path)


def test_manifest_lifecycle_is_validated(reference_dir: Path, tmp_path: Path) -> None:
    source = reference_dir / "crm3" / "scenarios" / "intake-document-01" / "manifest.json"
    manifest = read_json(source)
    broken = {
        "terminal not last": {**manifest, "steps": list(reversed(manifest["steps"]))},
        "unknown field": {**manifest, "surprise": True},
        "contradicting status": {**manifest, "expected_status": "failure"},
        "negative delay": {
            **manifest,
            "steps": [
                manifest["steps"][0],
                {"id": "d", "kind": "delay", "delay_ms": -1},
                manifest["steps"][2],
            ],
        },
    }
    for name, document in broken.items():
        target = tmp_path / "crm3" / "scenarios" / "x" / "manifest.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(
            reference_dir / "crm3" / "evals", tmp_path / "crm3" / "evals", dirs_exist_ok=True
        )
        target.write_text(json.dumps(document))
        with pytest.raises(InvalidData):
            load_scenario(target)
        assert name


def test_delays_advance_a_virtual_clock_and_never_sleep(bli61_request: ExecutionRequest) -> None:
    runtime = ScriptedRuntime([ScriptedSuccess(delay_ms=60_000)])
    runtime.execute(bli61_request)
    runtime.execute(bli61_request)
    assert runtime.clock.now_ms == 120_000
    slow = ScriptedRuntime([ScriptedSuccess(delay_ms=5_000)], timeout_ms=1_000)
    with pytest.raises(RuntimeFailureError) as raised:
        slow.execute(bli61_request)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"


def test_outcomes_play_in_order_then_the_last_repeats(bli61_request: ExecutionRequest) -> None:
    runtime = ScriptedRuntime(
        [
            ScriptedFailure(RuntimeFailureCode.RATE_LIMITED, "busy", retry_after_ms=100),
            ScriptedSuccess(),
        ]
    )
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(bli61_request)
    assert raised.value.failure.retry_after_ms == 100
    first = runtime.execute(bli61_request)
    assert runtime.execute(bli61_request) == first


EVENTS_MANIFEST = """\
api_version: templiqx.mock/v1alpha1
id: streamed-greeting
contract: greeting
kind: happy_path
input: request.json
expected_diagnostics: []
receipt_payload_policy: fingerprints_only
events:
  - {kind: start}
  - {kind: delta, text: '{"greeting": '}
  - {kind: reasoning, text: 'thinking'}
  - {kind: delta, text: '"Hello Ryan"}'}
  - {kind: usage, input_tokens: 12, output_tokens: 5}
  - {kind: finish, finish_reason: stop}
  - {kind: end}
expected_status: success
expected_failure: null
evidence: []
document_expectation: {status: not_applicable, unresolved_references: 0}
"""


def test_events_manifest_replays_deltas_then_the_execute_receipt(
    tmp_path: Path, reference_dir: Path
) -> None:
    (tmp_path / "request.json").write_text(
        json.dumps({"inputs": {"name": "Ryan"}, "context": {"organization": "Blinqx"}})
    )
    (tmp_path / "manifest.yaml").write_text(EVENTS_MANIFEST)
    scenario = load_scenario(tmp_path / "manifest.yaml")
    assert scenario.render_request == RenderRequest(
        inputs={"name": "Ryan"}, context={"organization": "Blinqx"}
    )
    from templiqx_core._compiler import compile_contract

    interaction = compile_contract(
        reference_dir / "demo" / "greeting.yaml", scenario.render_request, ["structured_output"]
    ).interaction
    assert isinstance(interaction, CompiledInteraction)
    request = ExecutionRequest(interaction=interaction)
    runtime = ScriptedRuntime.from_scenario(scenario)
    events: list[StreamEvent] = []
    streamed = runtime.execute_streaming(request, events.append)
    assert events[:2] == [DeltaEvent(text='{"greeting": '), DeltaEvent(text='"Hello Ryan"}')]
    assert len(events) == 3
    assert streamed == runtime.execute(request)
    assert streamed.output_fingerprint == fingerprint({"greeting": "Hello Ryan"})
    check_adapter(runtime, request)


def test_scripted_runtime_passes_the_conformance_kit(bli61_request: ExecutionRequest) -> None:
    failing = ScriptedRuntime([ScriptedFailure(RuntimeFailureCode.UNAVAILABLE, "down")])
    report = check_adapter(
        ScriptedRuntime([ScriptedSuccess(deltas=("a", "b"))]),
        bli61_request,
        failing_request=bli61_request,
        failing_adapter=failing,
    )
    assert report.passed == [
        "streaming_parity",
        "sink_exception_propagates",
        "concurrent_use",
        "failure_projection",
    ]


def test_declared_validity_must_match_the_output(bli61_request: ExecutionRequest) -> None:
    lying = ScriptedRuntime([ScriptedSuccess(output={"x": 1}, expect_schema_valid=True)])
    with pytest.raises(InvalidData, match="output_schema_valid=True"):
        lying.execute(bli61_request)
