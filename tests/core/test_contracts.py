"""Wire contracts serialize exactly as the reference does, and reject unknown fields."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from templiqx_core import (
    AdapterDescriptor,
    CompiledInteraction,
    CompiledMessage,
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
)
from tests.conftest import parse_stream_event

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
    assert bare.model_dump_json() == '{"code":"TQX_X","severity":"warning","message":"m"}'


# One instance of every wire type, with the exact text serde_json writes for it
# (``serde_json::to_string``): struct fields in declaration order, ``Option`` fields with
# ``skip_serializing_if`` omitted when None, maps (``BTreeMap``, ``serde_json::Value``)
# with sorted keys although given unsorted, an integer beyond u64 written as the f64
# serde_json reads it as, and an envelope whose ``result`` is ``[]`` keeping it.
SPAN = SourceSpan(line=3, column=5, end_line=3, end_column=9)
DIAGNOSTIC = Diagnostic(
    code="TQX_X",
    severity="error",
    message="m",
    file="c.yaml",
    json_pointer="/a",
    span=SPAN,
    help="h",
)
UNSORTED = {"z": 1, "a": {"y": [{"b": 2, "a": 1}], "x": 2**70}, "m": -0.0}
UNSORTED_TEXT = '{"a":{"x":1.1805916207174113e+21,"y":[{"a":1,"b":2}]},"m":-0.0,"z":1}'
DESCRIPTOR = AdapterDescriptor(id="a", version="1", capabilities=["structured_output"])
WIRE_INTERACTION = CompiledInteraction(
    compiler="templiqx-core/0.2.0",
    contract_id="c",
    contract_version="1",
    messages=[CompiledMessage(role="developer", content="é\n\u0001")],
    output_schema={"type": "object", "properties": {"b": {}, "a": {}}},
    required_capabilities=["x"],
    target_capabilities=["x", "y"],
    runtime_policy={"temperature": 0.2, "max_tokens": 10},
    extensions={"vendor.z": True, "vendor.a": {"k": None}},
)
INTERACTION_TEXT = (
    '{"compiler":"templiqx-core/0.2.0","contract_id":"c","contract_version":"1",'
    '"messages":[{"role":"developer","content":"é\\n\\u0001"}],'
    '"output_schema":{"properties":{"a":{},"b":{}},"type":"object"},'
    '"required_capabilities":["x"],"target_capabilities":["x","y"],'
    '"runtime_policy":{"max_tokens":10,"temperature":0.2},'
    '"extensions":{"vendor.a":{"k":null},"vendor.z":true}}'
)
WIRE_RECEIPT = ExecutionReceipt(
    adapter=DESCRIPTOR,
    request_fingerprint="r",
    output_fingerprint="o",
    output=UNSORTED,
    output_schema_valid=False,
)
RECEIPT_TEXT = (
    '{"adapter":{"id":"a","version":"1","capabilities":["structured_output"]},'
    f'"request_fingerprint":"r","output_fingerprint":"o","output":{UNSORTED_TEXT},'
    '"output_schema_valid":false}'
)
WIRE_TYPES = [
    (SPAN, '{"line":3,"column":5,"end_line":3,"end_column":9}'),
    (
        DIAGNOSTIC,
        '{"code":"TQX_X","severity":"error","message":"m","file":"c.yaml","json_pointer":"/a",'
        '"span":{"line":3,"column":5,"end_line":3,"end_column":9},"help":"h"}',
    ),
    (CompiledMessage(role="user", content="hi"), '{"role":"user","content":"hi"}'),
    (DESCRIPTOR, '{"id":"a","version":"1","capabilities":["structured_output"]}'),
    (WIRE_INTERACTION, INTERACTION_TEXT),
    (
        RenderRequest(inputs={"name": "R", "age": 3}, context={"z": [], "a": {"d": 1, "c": 2}}),
        '{"inputs":{"age":3,"name":"R"},"context":{"a":{"c":2,"d":1},"z":[]}}',
    ),
    (
        ExecutionRequest(interaction=WIRE_INTERACTION),
        f'{{"interaction":{INTERACTION_TEXT},"fixture_output":null}}',
    ),
    (
        ExecutionRequest(interaction=WIRE_INTERACTION, fixture_output=UNSORTED),
        f'{{"interaction":{INTERACTION_TEXT},"fixture_output":{UNSORTED_TEXT}}}',
    ),
    (WIRE_RECEIPT, RECEIPT_TEXT),
    (DeltaEvent(text="par"), '{"kind":"Delta","text":"par"}'),
    (
        ToolCallDeltaEvent(name="f", arguments_fragment='{"q'),
        '{"kind":"ToolCallDelta","name":"f","arguments_fragment":"{\\"q"}',
    ),
    (CompleteEvent.from_receipt(WIRE_RECEIPT), '{"kind":"Complete",' + RECEIPT_TEXT[1:]),
    (
        FailedEvent(code="TQX_RUNTIME_TIMEOUT", message="slow"),
        '{"kind":"Failed","code":"TQX_RUNTIME_TIMEOUT","message":"slow"}',
    ),
    (
        OperationEnvelope[list[str]](operation="catalog", ok=True, result=[]),
        '{"api_version":"templiqx/v1alpha1","operation":"catalog","ok":true,"result":[],'
        '"diagnostics":[],"fingerprints":{}}',
    ),
    (
        OperationEnvelope[ExecutionReceipt](
            operation="execute_contract",
            ok=False,
            result=WIRE_RECEIPT,
            diagnostics=[DIAGNOSTIC],
            fingerprints={"request": "r", "output": "o"},
            stream_events=[FailedEvent(code="c", message="m")],
        ),
        '{"api_version":"templiqx/v1alpha1","operation":"execute_contract","ok":false,'
        f'"result":{RECEIPT_TEXT},"diagnostics":[{{"code":"TQX_X","severity":"error",'
        '"message":"m","file":"c.yaml","json_pointer":"/a","span":{"line":3,"column":5,'
        '"end_line":3,"end_column":9},"help":"h"}],"fingerprints":{"output":"o","request":"r"},'
        '"stream_events":[{"kind":"Failed","code":"c","message":"m"}]}',
    ),
    (
        OperationEnvelope[ExecutionReceipt](operation="execute_contract", ok=False),
        '{"api_version":"templiqx/v1alpha1","operation":"execute_contract","ok":false,'
        '"diagnostics":[],"fingerprints":{}}',
    ),
]


@pytest.mark.parametrize(("value", "text"), WIRE_TYPES, ids=lambda v: type(v).__name__)
def test_every_wire_type_serializes_as_serde(value: object, text: str) -> None:
    assert value.model_dump_json() == text  # type: ignore[attr-defined]


def test_pretty_form_is_serde_to_string_pretty() -> None:
    envelope = OperationEnvelope[list[str]](
        operation="catalog", ok=True, result=[], fingerprints={"b": "2", "a": "1"}
    )
    assert envelope.model_dump_json(indent=2) == (
        "{\n"
        '  "api_version": "templiqx/v1alpha1",\n'
        '  "operation": "catalog",\n'
        '  "ok": true,\n'
        '  "result": [],\n'
        '  "diagnostics": [],\n'
        '  "fingerprints": {\n'
        '    "a": "1",\n'
        '    "b": "2"\n'
        "  }\n"
        "}"
    )


def test_input_acceptance_follows_serde() -> None:
    envelope = OperationEnvelope[ExecutionReceipt].model_validate_json(
        '{"api_version":"templiqx/v2","operation":"x","ok":true}'
    )
    assert envelope.api_version == "templiqx/v2"
    assert ExecutionRequest.model_validate({"interaction": WIRE_INTERACTION.to_json()})
    for bad_span in (
        {"line": 1, "column": 1},  # all four fields are required
        {"line": "1", "column": 1, "end_line": 1, "end_column": 1},  # no coercion
        {"line": -1, "column": 1, "end_line": 1, "end_column": 1},  # u32
        {"line": 2**32, "column": 1, "end_line": 1, "end_column": 1},
        {"line": 1.0, "column": 1, "end_line": 1, "end_column": 1},
    ):
        with pytest.raises(ValidationError):
            SourceSpan.model_validate(bad_span)
    with pytest.raises(ValidationError):
        ExecutionReceipt.model_validate({**RECEIPT, "output_schema_valid": 1})
    with pytest.raises(ValidationError):
        OperationEnvelope[ExecutionReceipt].model_validate_json(
            '{"api_version":"v","operation":"x","ok":"true"}'
        )
