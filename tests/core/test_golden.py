"""Golden parity with the Rust reference on the 8 crm3 scenarios.

Each scenario is run the way the reference conformance test runs it
(``crates/templiqx-conformance/tests/crm3_failures.rs``,
``checked_in_crm3_scenarios_execute_without_sleeping``): the mock plays the manifest, the
request is the manifest's ``input``, ``fixture_output`` is its ``expected_output`` (or
none), target capabilities ``["structured_output"]``, no streaming. Then:

* the outcome fingerprint, computed with the mock's formulas (``success_receipt_fingerprint``
  for an ok envelope, ``failure_receipt_fingerprint`` otherwise, with the failure
  fingerprint and retry read back from the diagnostic's ``help`` exactly as the reference
  test's ``outcome_fingerprint`` does), must equal the manifest's
  ``golden_receipt_fingerprint``, which the reference itself produced;
* the envelope, printed as the reference CLI prints it (``serde_json::to_string_pretty``),
  must equal ``golden/<scenario>.json`` byte for byte.

How the literal envelopes were derived from the reference source (the reference cannot be
built here, it needs crates.io): field order and omission from ``OperationEnvelope``,
``ExecutionReceipt``, ``AdapterDescriptor`` and ``Diagnostic`` in
``templiqx-contracts/src/lib.rs``; ``operation``, the ``request``/``output`` fingerprints,
the ``TQX_OUTPUT_SCHEMA`` message and ``/output`` pointer, and the failure envelope (no
receipt, no fingerprints) from ``execute_contract``/``port_failure``/``port_diagnostic`` in
``templiqx-application/src/lib.rs``; the message ``runtime failure CODE: detail`` from
``PortError``'s Display in ``templiqx-ports``; the adapter descriptor (version = the
workspace version 0.2.0), the step id as ``scenario``, and the failure fingerprint
``{id, code, retry_after_ms}`` from ``templiqx-mock``; ``output`` keys sorted because it is
a ``serde_json::Value`` without ``preserve_order``. The hashes in them are the ones the
goldens pin: a request fingerprint enters ``success_receipt_fingerprint`` and a failure
fingerprint enters ``failure_receipt_fingerprint``, so the first check fails if either
differs from the reference's.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from templiqx_core import (
    ExecutionReceipt,
    OperationEnvelope,
    Scenario,
    ScriptedRuntime,
    codes,
    execute_contract,
    fingerprint,
    load_inventory,
)
from templiqx_core._receipts import OUTPUT_SCHEMA_SUMMARY
from tests.conftest import REFERENCE

GOLDEN = Path(__file__).parent / "golden"
INVENTORY = REFERENCE / "crm3" / "scenarios" / "inventory.json"
SCENARIOS = {s.manifest.id: s for s in load_inventory(INVENTORY)}


def _help_field(help_text: str | None, name: str) -> str | None:
    for field in (help_text or "").split():
        if field.startswith(f"{name}="):
            return field[len(name) + 1 :]
    return None


def success_receipt_fingerprint(receipt: ExecutionReceipt) -> str:
    """The reference mock's payload-free fingerprint of a successful outcome."""
    fields = {"request_fingerprint", "output_fingerprint", "output_schema_valid"}
    return fingerprint({"outcome": "success", **receipt.model_dump(include=fields)})


def failure_receipt_fingerprint(code: str, failure: str, retry_after_ms: int | None) -> str:
    """The reference mock's payload-free fingerprint of a failed outcome."""
    return fingerprint(
        {
            "outcome": "failure",
            "code": code,
            "failure_fingerprint": failure,
            "retry_after_ms": retry_after_ms,
        }
    )


def outcome_fingerprint(envelope: OperationEnvelope[ExecutionReceipt]) -> str:
    """The reference conformance test's ``outcome_fingerprint``, line for line."""
    if envelope.result is not None:
        if envelope.ok:
            return success_receipt_fingerprint(envelope.result)
        code = envelope.diagnostics[0].code if envelope.diagnostics else "unknown"
        return failure_receipt_fingerprint(code, envelope.result.output_fingerprint, None)
    diagnostic = envelope.diagnostics[0]
    retry = _help_field(diagnostic.help, "retry_after_ms")
    return failure_receipt_fingerprint(
        diagnostic.code,
        _help_field(diagnostic.help, "fingerprint") or "",
        int(retry) if retry is not None and retry.isdigit() else None,
    )


def run(scenario: Scenario, *, stream: bool = False) -> OperationEnvelope[ExecutionReceipt]:
    contract = REFERENCE / "crm3" / "contracts" / f"{scenario.manifest.contract}.yaml"
    return execute_contract(
        contract,
        scenario.render_request,
        runtime=ScriptedRuntime.from_scenario(scenario),
        capabilities=["structured_output"],
        fixture_output=scenario.expected_output,
        stream=stream,
    )


def test_all_eight_scenarios_are_covered() -> None:
    assert len(SCENARIOS) == 8
    assert sorted(p.stem for p in GOLDEN.glob("*.json")) == sorted(SCENARIOS)


@pytest.mark.parametrize("scenario_id", sorted(SCENARIOS))
def test_golden_receipt_fingerprint(scenario_id: str) -> None:
    scenario = SCENARIOS[scenario_id]
    assert scenario.manifest.golden_receipt_fingerprint is not None
    assert outcome_fingerprint(run(scenario)) == scenario.manifest.golden_receipt_fingerprint


def reference_view(
    envelope: OperationEnvelope[ExecutionReceipt],
) -> OperationEnvelope[ExecutionReceipt]:
    """The envelope without the per-rule ``TQX_OUTPUT_SCHEMA`` diagnostics, which follow
    the reference's one at ``/output`` (a deliberate addition: the reference names no rule)."""
    kept = [
        d
        for d in envelope.diagnostics
        if d.code != codes.OUTPUT_SCHEMA or d.message == OUTPUT_SCHEMA_SUMMARY
    ]
    return envelope.model_copy(update={"diagnostics": kept})


@pytest.mark.parametrize("scenario_id", sorted(SCENARIOS))
def test_envelope_is_the_reference_envelope(scenario_id: str) -> None:
    expected = (GOLDEN / f"{scenario_id}.json").read_text(encoding="utf-8")
    envelope = reference_view(run(SCENARIOS[scenario_id]))
    assert envelope.model_dump_json(indent=2) + "\n" == expected


def test_schema_invalid_output_names_each_failing_field_and_rule_after_the_reference() -> None:
    envelope = run(SCENARIOS["invalid-output-schema"])
    assert envelope.diagnostics[0].json_pointer == "/output"
    assert [(d.code, d.json_pointer, d.message) for d in envelope.diagnostics[1:]] == [
        ("TQX_OUTPUT_SCHEMA", "/output/end_date", "/end_date: missing (required)"),
        ("TQX_OUTPUT_SCHEMA", "/output/term_months", "/term_months: missing (required)"),
        ("TQX_OUTPUT_SCHEMA", "/output/notice_date", "/notice_date: missing (required)"),
        ("TQX_OUTPUT_SCHEMA", "/output/evidence", "/evidence: missing (required)"),
        (
            "TQX_OUTPUT_SCHEMA",
            "/output/effective_date",
            '/effective_date: fails format "date"',
        ),
    ]


def test_streamed_success_lists_the_complete_event_and_keeps_the_golden() -> None:
    scenario = SCENARIOS["intake-document-01"]
    plain, streamed = run(scenario), run(scenario, stream=True)
    assert outcome_fingerprint(streamed) == scenario.manifest.golden_receipt_fingerprint
    dumped = streamed.to_json()
    complete = {"kind": "Complete", **plain.to_json()["result"]}
    assert dumped["stream_events"] == [complete]
    assert {k: v for k, v in dumped.items() if k != "stream_events"} == plain.to_json()


def test_streamed_failure_envelope_has_no_stream_events() -> None:
    # The reference returns port_failure(...) for a runtime error: the events go nowhere.
    failed = run(SCENARIOS["ambiguous-date"], stream=True)
    assert failed.stream_events == []
    assert failed.model_dump_json(indent=2) + "\n" == (GOLDEN / "ambiguous-date.json").read_text()
