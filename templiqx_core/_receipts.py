"""Building receipts: the one place fingerprints and schema validity are computed."""

from __future__ import annotations

from typing import Any

from ._canonical import fingerprint
from ._contracts import AdapterDescriptor, CompiledInteraction, ExecutionReceipt
from ._schema import SchemaValidator, compile_schema

__all__ = ["build_receipt", "request_fingerprint"]


def request_fingerprint(interaction: CompiledInteraction) -> str:
    """Fingerprint of the compiled interaction (not of the whole request), for every adapter.

    Computed once per interaction and kept on it: interactions are immutable all the way
    down (``model_construct`` skips validation, so their containers are frozen here).
    """
    cached = interaction._fingerprint
    if cached is None:
        interaction._freeze()
        cached = fingerprint(interaction.model_dump(mode="json"))
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
