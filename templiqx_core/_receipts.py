"""Building receipts: the one place fingerprints and schema validity are computed."""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticSerializationError

from . import codes
from ._canonical import NotJson, fingerprint
from ._contracts import AdapterDescriptor, CompiledInteraction, Diagnostic, ExecutionReceipt
from ._errors import InvalidData
from ._schema import SchemaValidator, compile_schema, schema_messages

OUTPUT_SCHEMA_SUMMARY = "runtime output does not satisfy the contract schema"
"""The reference application's one message for a schema-invalid output, at ``/output``."""


def request_fingerprint(interaction: CompiledInteraction) -> str:
    """The interaction's fingerprint, cached on it once its containers are frozen."""
    cached = interaction._fingerprint
    if cached is None:
        interaction._freeze()
        try:
            dumped = interaction.model_dump(mode="json")
        except (PydanticSerializationError, ValueError, RecursionError):
            # pydantic refuses nesting past its own limit before canonical JSON does.
            raise NotJson("nested too deeply to serialize", "") from None
        cached = fingerprint(dumped)
        interaction._fingerprint = cached
    return cached


def build_receipt(
    adapter: AdapterDescriptor,
    interaction: CompiledInteraction,
    output: Any,
    *,
    request_fp: str | None = None,
    validator: SchemaValidator | None = None,
) -> ExecutionReceipt:
    """Fingerprint and validate ``output`` (a parsed JSON value) against the interaction."""
    check = validator or compile_schema(interaction.output_schema)
    valid = check.is_valid(output)
    return ExecutionReceipt.model_construct(
        adapter=adapter,
        request_fingerprint=request_fp or request_fingerprint(interaction),
        output_fingerprint=fingerprint(output),
        output=output,
        output_schema_valid=valid,
    )


def _output_failures(schema: Any, output: Any) -> list[tuple[str, str]]:
    """(pointer in the output, message) for each failed rule, bounded."""
    try:
        return schema_messages(compile_schema(schema), schema, output)
    except (InvalidData, ValueError):  # an invalid schema or a value that is not JSON
        return []


def output_schema_messages(schema: Any, output: Any) -> list[str]:
    """Why ``output`` fails ``schema``, one line per failed rule (none if it passes)."""
    return [message for _, message in _output_failures(schema, output)]


def output_schema_diagnostics(schema: Any, output: Any) -> list[Diagnostic]:
    """``TQX_OUTPUT_SCHEMA``: the reference's summary at ``/output``, then one per failed rule."""
    failures = [("", OUTPUT_SCHEMA_SUMMARY), *_output_failures(schema, output)]
    return [
        Diagnostic(
            code=codes.OUTPUT_SCHEMA,
            severity="error",
            message=message,
            json_pointer=f"/output{pointer}",
        )
        for pointer, message in failures
    ]
