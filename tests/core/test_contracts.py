"""Wire contracts serialize exactly as the reference does, and reject unknown fields."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from templiqx_core import (
    AdapterDescriptor,
    CompiledInteraction,
    CompleteEvent,
    DeltaEvent,
    Diagnostic,
    ExecutionReceipt,
    ExecutionRequest,
    FailedEvent,
    OperationEnvelope,
    RenderRequest,
    SourceSpan,
    ToolCallDeltaEvent,
    parse_stream_event,
)

ADAPTER = {"id": "a", "version": "1", "capabilities": ["structured_output"]}
RECEIPT = {
    "adapter": ADAPTER,
    "request_fingerprint": "r" * 64,
    "output_fingerprint": "o" * 64,
    "output": {"greeting": "hi"},
    "output_schema_valid": True,
}
INTERACTION = {
    "compiler": "templiqx-core/0.1.0",
    "contract_id": "greeting",
    "contract_version": "0.1.0",
    "messages": [{"role": "system", "content": "x"}, {"role": "user", "content": "y"}],
    "output_schema": {"type": "object"},
    "required_capabilities": ["structured_output"],
    "target_capabilities": ["structured_output"],
    "runtime_policy": {"temperature": 0},
    "extensions": {},
}


def _round_trip(model: type, data: dict[str, object]) -> None:
    parsed = model.model_validate(data)
    assert json.loads(parsed.model_dump_json()) == data
    assert model.model_validate_json(parsed.model_dump_json()) == parsed


def test_interaction_receipt_descriptor_round_trip() -> None:
    _round_trip(CompiledInteraction, INTERACTION)
    _round_trip(ExecutionReceipt, RECEIPT)
    _round_trip(AdapterDescriptor, ADAPTER)
    _round_trip(RenderRequest, {"inputs": {"name": "Ryan"}, "context": {}})


def test_request_keeps_null_fixture_output() -> None:
    request = ExecutionRequest.model_validate({"interaction": INTERACTION})
    assert json.loads(request.model_dump_json()) == {
        "interaction": INTERACTION,
        "fixture_output": None,
    }


@pytest.mark.parametrize(
    "event",
    [
        {"kind": "Delta", "text": "par"},
        {"kind": "ToolCallDelta", "name": "lookup", "arguments_fragment": '{"q'},
        {"kind": "Complete", **RECEIPT},
        {"kind": "Failed", "code": "TQX_RUNTIME_TIMEOUT", "message": "slow"},
    ],
)
def test_stream_events_are_internally_tagged(event: dict[str, object]) -> None:
    parsed = parse_stream_event(event)
    dumped = json.loads(parsed.model_dump_json())
    assert dumped == event
    assert next(iter(dumped)) == "kind"  # the tag leads, as serde writes it
    assert parse_stream_event(json.dumps(event)) == parsed


def test_event_classes_map_to_variant_names() -> None:
    assert isinstance(parse_stream_event({"kind": "Delta", "text": ""}), DeltaEvent)
    assert isinstance(
        parse_stream_event({"kind": "ToolCallDelta", "name": "f", "arguments_fragment": ""}),
        ToolCallDeltaEvent,
    )
    assert isinstance(
        parse_stream_event({"kind": "Failed", "code": "c", "message": "m"}), FailedEvent
    )


def test_complete_event_carries_the_receipt_inline() -> None:
    receipt = ExecutionReceipt.model_validate(RECEIPT)
    event = CompleteEvent.from_receipt(receipt)
    assert event.receipt == receipt
    assert json.loads(event.model_dump_json()) == {"kind": "Complete", **RECEIPT}


def test_unknown_fields_are_rejected_by_name() -> None:
    with pytest.raises(ValidationError, match="surprise"):
        ExecutionReceipt.model_validate({**RECEIPT, "surprise": 1})
    with pytest.raises(ValidationError, match="nested"):
        CompiledInteraction.model_validate(
            {**INTERACTION, "messages": [{"role": "user", "content": "x", "nested": 1}]}
        )
    with pytest.raises(ValidationError, match="extra"):
        parse_stream_event({"kind": "Delta", "text": "x", "extra": True})


def test_unknown_role_and_event_kind_are_rejected() -> None:
    with pytest.raises(ValidationError):
        CompiledInteraction.model_validate(
            {**INTERACTION, "messages": [{"role": "tool", "content": "x"}]}
        )
    with pytest.raises(ValidationError):
        parse_stream_event({"kind": "Partial", "text": "x"})


def test_diagnostic_omits_empty_optional_fields() -> None:
    bare = Diagnostic(code="TQX_X", severity="warning", message="m")
    assert json.loads(bare.model_dump_json()) == {
        "code": "TQX_X",
        "severity": "warning",
        "message": "m",
    }
    full = Diagnostic(
        code="TQX_X",
        severity="error",
        message="m",
        file="c.yaml",
        json_pointer="/a",
        span=SourceSpan(line=3, column=5),
        help="h",
    )
    assert json.loads(full.model_dump_json()) == {
        "code": "TQX_X",
        "severity": "error",
        "message": "m",
        "file": "c.yaml",
        "json_pointer": "/a",
        "span": {"line": 3, "column": 5},
        "help": "h",
    }


def test_envelope_omits_result_and_empty_stream_events() -> None:
    failed: OperationEnvelope[ExecutionReceipt] = OperationEnvelope(operation="execute", ok=False)
    assert json.loads(failed.model_dump_json()) == {
        "api_version": "templiqx/v1alpha1",
        "operation": "execute",
        "ok": False,
        "diagnostics": [],
        "fingerprints": {},
    }
    receipt = ExecutionReceipt.model_validate(RECEIPT)
    streamed = OperationEnvelope(
        operation="execute",
        ok=True,
        result=receipt,
        fingerprints={"output": "o" * 64},
        stream_events=[CompleteEvent.from_receipt(receipt)],
    )
    dumped = json.loads(streamed.model_dump_json())
    assert dumped["result"] == RECEIPT
    assert dumped["stream_events"] == [{"kind": "Complete", **RECEIPT}]
