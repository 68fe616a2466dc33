"""Typed results: a receipt's output as the host's pydantic model, and a contract's
``output_schema`` kept in step with that model."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
from pydantic import BaseModel, Field

from templiqx_core import (
    Contract,
    ExecutionReceipt,
    InvalidData,
    OutputSchemaError,
    OutputTypeError,
    RenderRequest,
    ScriptedRuntime,
    ScriptedSuccess,
    check_output_model,
    execute_contract,
    output_as,
    output_schema_for,
)

SECRET = "sk-live-never-in-an-error"


class Ticket(BaseModel):
    category: Literal["billing", "bug", "other"]
    priority: int = Field(ge=1, le=3)
    summary: str = Field(description="one line for the queue")


def contract(output_schema: dict[str, Any]) -> Contract:
    return Contract.model_validate(
        {
            "api_version": "templiqx/v1alpha1",
            "id": "triage",
            "version": "1",
            "messages": [{"role": "user", "content": [{"kind": "text", "value": "Triage."}]}],
            "output_schema": output_schema,
        }
    )


def receipt_for(output: Any, schema: dict[str, Any] | None = None) -> ExecutionReceipt:
    envelope = execute_contract(
        contract(schema or output_schema_for(Ticket)),
        RenderRequest(),
        runtime=ScriptedRuntime([ScriptedSuccess()]),
        capabilities=[],
        fixture_output=output,
    )
    assert envelope.result is not None
    return envelope.result


def test_output_as_returns_the_host_model() -> None:
    receipt = receipt_for({"category": "bug", "priority": 2, "summary": "login crash"})
    ticket = receipt.output_as(Ticket)
    assert ticket == Ticket(category="bug", priority=2, summary="login crash")
    assert output_as(receipt, Ticket) == ticket


def test_output_as_leaves_the_receipt_wire_shape_alone() -> None:
    receipt = receipt_for({"category": "bug", "priority": 2, "summary": "x"})
    receipt.output_as(Ticket)
    assert list(receipt.to_json()) == [
        "adapter",
        "request_fingerprint",
        "output_fingerprint",
        "output",
        "output_schema_valid",
    ]


def test_schema_invalid_output_is_a_typed_error_naming_each_rule() -> None:
    schema = output_schema_for(Ticket)
    receipt = receipt_for({"category": SECRET, "priority": 2, "summary": "x"}, schema)
    with pytest.raises(OutputSchemaError) as caught:
        receipt.output_as(Ticket, schema=schema)
    assert caught.value.code == "TQX_OUTPUT_SCHEMA"
    assert str(caught.value) == (
        "output does not satisfy the contract schema: "
        '/category: not one of the enum ["billing", "bug", "other"]'
    )


def test_output_the_model_refuses_is_a_typed_error_naming_the_field() -> None:
    # The contract's schema is looser than the model: the model has the last word.
    loose = {"type": "object"}
    receipt = receipt_for({"category": "bug", "priority": 9, SECRET: 1}, loose)
    assert receipt.output_schema_valid
    with pytest.raises(OutputTypeError) as caught:
        receipt.output_as(Ticket)
    assert caught.value.code == "TQX_OUTPUT_TYPE"
    message = str(caught.value)
    assert message.startswith("output does not validate as Ticket: ")
    assert "/priority: Input should be less than or equal to 3 (less_than_equal)" in message
    assert "/summary: Field required (missing)" in message
    assert SECRET not in message


def test_output_schema_for_drops_annotations_but_keeps_constraints() -> None:
    schema = output_schema_for(Ticket)
    assert schema == {
        "type": "object",
        "properties": {
            "category": {"enum": ["billing", "bug", "other"], "type": "string"},
            "priority": {"maximum": 3, "minimum": 1, "type": "integer"},
            "summary": {"type": "string"},
        },
        "required": ["category", "priority", "summary"],
    }


def test_a_property_named_title_survives_annotation_stripping() -> None:
    class Book(BaseModel):
        title: str

    assert output_schema_for(Book)["properties"] == {"title": {"type": "string"}}


def test_check_output_model_accepts_an_agreeing_contract_file(tmp_path: Path) -> None:
    path = tmp_path / "triage.yaml"
    path.write_text(
        """\
api_version: templiqx/v1alpha1
id: triage
version: "1"
messages:
  - role: user
    content: [{kind: text, value: Triage.}]
output_schema:
  title: Ticket
  type: object
  required: [category, priority, summary]
  properties:
    category: {type: string, enum: [billing, bug, other], description: queue}
    priority: {type: integer, minimum: 1, maximum: 3}
    summary: {type: string}
"""
    )
    check_output_model(path, Ticket)
    check_output_model(contract(output_schema_for(Ticket)), Ticket)


def test_check_output_model_names_where_schema_and_model_drift() -> None:
    drifted = output_schema_for(Ticket)
    drifted["properties"]["priority"] = {"type": "integer", "minimum": 1, "maximum": 5}
    with pytest.raises(OutputTypeError) as caught:
        check_output_model(drifted, Ticket)
    assert caught.value.code == "TQX_OUTPUT_TYPE"
    assert str(caught.value) == (
        "output_schema does not match Ticket: /properties/priority/maximum: "
        "output_schema and the model's schema differ"
    )


def test_output_schema_for_refuses_what_is_not_a_model() -> None:
    with pytest.raises(InvalidData) as caught:
        output_schema_for(dict)  # type: ignore[arg-type]
    assert caught.value.code == "TQX_DATA_INVALID"
