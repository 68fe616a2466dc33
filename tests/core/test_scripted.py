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
from templiqx_core.conformance import check_adapter
from tests.conftest import read_json

INVENTORY = Path("crm3") / "scenarios" / "inventory.json"
CONTRACTS = {
    "bli-61-date-term-extraction": "bli-61-date-term-extraction.yaml",
    "bli-62-document-drafting": "bli-62-document-drafting.yaml",
}


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
        "negative delay": {
            **manifest,
            "steps": [
                manifest["steps"][0],
                {"id": "d", "kind": "delay", "delay_ms": -1},
                manifest["steps"][2],
            ],
        },
        "zero delay (reference: delay_ms > 0)": {
            **manifest,
            "steps": [
                manifest["steps"][0],
                {"id": "d", "kind": "delay", "delay_ms": 0},
                manifest["steps"][2],
            ],
        },
        "duplicate step id": {
            **manifest,
            "steps": [manifest["steps"][0], {**manifest["steps"][2], "id": "request-received"}],
        },
        "api_version": {**manifest, "api_version": "templiqx.mock/v2"},
        "steps and events": {
            **manifest,
            "events": [{"kind": "start", "id": "s"}, {"kind": "end", "id": "e"}],
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
    assert runtime.now_ms == 120_000
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
  - {kind: start, id: s}
  - {kind: delta, id: d1, text: 'Hello '}
  - {kind: reasoning, id: r, text: 'thinking'}
  - {kind: delta, id: d2, text: 'Ryan'}
  - {kind: usage, id: u1, input_tokens: 12, output_tokens: 5}
  - {kind: usage, id: u2, input_tokens: 1, output_tokens: 1}
  - {kind: end, id: e}
  - {kind: finish, id: f, output_schema_valid: true}
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
    assert events[:2] == [DeltaEvent(text="Hello "), DeltaEvent(text="Ryan")]
    assert len(events) == 3
    assert streamed == runtime.execute(request)
    # The reference mock: no finish output and no fixture output -> the aggregate, with
    # the validity the finish event declares (not what the schema would say).
    assert streamed.output == {
        "text": "Hello Ryan",
        "reasoning": "thinking",
        "usage": {"input_tokens": 13, "output_tokens": 6},
    }
    assert streamed.output_schema_valid is True
    with_fixture = request.model_copy(update={"fixture_output": {"greeting": "Hi"}})
    assert runtime.execute(with_fixture).output == {"greeting": "Hi"}
    check_adapter(runtime, request)


@pytest.mark.parametrize(
    "events",
    [
        [{"kind": "start", "id": "s"}, {"kind": "finish", "id": "f"}, {"kind": "end", "id": "e"}],
        [{"kind": "start", "id": "s"}, {"kind": "end", "id": "e"}],
        [{"kind": "start", "id": "x"}, {"kind": "end", "id": "x"}, {"kind": "finish", "id": "f"}],
        [{"kind": "start", "id": "s"}, {"kind": "delta", "id": "d", "text": ""}],
        [{"kind": "end", "id": "e"}, {"kind": "start", "id": "s"}, {"kind": "finish", "id": "f"}],
    ],
)
def test_events_lifecycle_follows_the_reference(tmp_path: Path, events: list[object]) -> None:
    (tmp_path / "request.json").write_text("{}")
    document = {
        "api_version": "templiqx.mock/v1alpha1",
        "id": "x",
        "contract": "greeting",
        "kind": "happy_path",
        "input": "request.json",
        "receipt_payload_policy": "fingerprints_only",
        "expected_status": "failure",
        "expected_failure": "TQX_OUTPUT_SCHEMA",
        "expected_diagnostics": ["TQX_OUTPUT_SCHEMA"],
        "events": events,
    }
    (tmp_path / "manifest.json").write_text(json.dumps(document))
    with pytest.raises(InvalidData):
        load_scenario(tmp_path / "manifest.json")


def test_scripted_runtime_passes_the_conformance_kit(bli61_request: ExecutionRequest) -> None:
    failing = ScriptedRuntime([ScriptedFailure(RuntimeFailureCode.UNAVAILABLE, "down")])
    passed = check_adapter(
        ScriptedRuntime([ScriptedSuccess(deltas=("a", "b"))]),
        bli61_request,
        failing_request=bli61_request,
        failing_adapter=failing,
    )
    assert passed == [
        "streaming_parity",
        "sink_exception_propagates",
        "concurrent_use",
        "failure_projection",
    ]


def test_declared_validity_is_reported_as_declared(bli61_request: ExecutionRequest) -> None:
    # As the reference mock: a declared validity is the receipt's, whatever the output.
    declared = ScriptedRuntime([ScriptedSuccess(output={"x": 1}, expect_schema_valid=True)])
    assert declared.execute(bli61_request).output_schema_valid is True
    # Undeclared, the output is validated (the reference's fake runtime).
    validated = ScriptedRuntime([ScriptedSuccess(output={"x": 1})])
    assert validated.execute(bli61_request).output_schema_valid is False


def test_failures_carry_their_step_id_and_fingerprint_as_the_mock(
    bli61_request: ExecutionRequest,
) -> None:
    runtime = ScriptedRuntime(
        [ScriptedFailure(RuntimeFailureCode.TIMEOUT, "slow", id="step-7", retry_after_ms=5)]
    )
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(bli61_request)
    failure = raised.value.failure
    assert failure.scenario_id == "step-7"
    assert failure.fingerprint == fingerprint(
        {"id": "step-7", "code": "TQX_RUNTIME_TIMEOUT", "retry_after_ms": 5}
    )
    assert str(raised.value) == "runtime failure TQX_RUNTIME_TIMEOUT: slow"


def test_inventory_paths_and_package_fail_closed(reference_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "reference"
    shutil.copytree(reference_dir / "crm3", root / "crm3")
    path = root / INVENTORY
    original = read_json(path)
    with pytest.raises(InvalidData, match="does not match 'other'"):
        load_inventory(path, package="other")
    assert len(load_inventory(path, package="crm3")) == 8
    for mutate, message in (
        (lambda e: e.update(manifest="../crm3/scenarios/x.json"), "not package-relative"),
        (lambda e: e.update(manifest="/etc/passwd"), "not package-relative"),
        (lambda e: e.update(manifest="crm3/scenarios/none/manifest.json"), "missing"),
        (lambda e: e["expectation"].update(output_schema_valid=True), "output_schema_valid"),
    ):
        inventory = json.loads(json.dumps(original))
        mutate(inventory["scenarios"][0])
        path.write_text(json.dumps(inventory))
        with pytest.raises(InvalidData, match=message):
            load_inventory(path)
