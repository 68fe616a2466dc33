"""Building receipts: the one place fingerprints and schema validity are computed."""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticSerializationError

from ._canonical import NotJson, fingerprint
from ._contracts import AdapterDescriptor, CompiledInteraction, ExecutionReceipt
from ._schema import SchemaValidator, compile_schema

__all__ = ["build_receipt", "request_fingerprint"]


def request_fingerprint(interaction: CompiledInteraction) -> str:
    """Fingerprint of the compiled interaction (not of the whole request), for every adapter.

    Computed once per interaction and kept on it: interactions are immutable all the way
    down (``model_construct`` skips validation, so their containers are frozen here).
    """
    # The private-attribute dict directly: pydantic's __getattr__ costs microseconds.
    private = interaction.__pydantic_private__
    cached = private.get("_fingerprint") if private else None
    if cached is None:
        interaction._freeze()
        try:
            dumped = interaction.model_dump(mode="json")
        except (PydanticSerializationError, ValueError, RecursionError):
            # pydantic refuses values nested past its own limit before canonical JSON
            # sees them (a 10 000-deep runtime_policy): the same refusal, not a raw error.
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
