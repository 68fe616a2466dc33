"""Building receipts: the one place fingerprints and schema validity are computed."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from ._canonical import fingerprint
from ._contracts import AdapterDescriptor, CompiledInteraction, ExecutionReceipt
from ._schema import SchemaValidator, compile_schema

__all__ = ["build_receipt", "request_fingerprint"]


_RECENT_SIZE = 256
_recent: OrderedDict[int, tuple[CompiledInteraction, str]] = OrderedDict()
_recent_lock = threading.Lock()


def request_fingerprint(interaction: CompiledInteraction) -> str:
    """Fingerprint of the compiled interaction (not of the whole request), for every adapter.

    Interactions are immutable and commonly executed many times, so the fingerprint of
    the same object is remembered (serializing the model costs more than hashing it).
    """
    hit = _recent.get(id(interaction))
    if hit is not None and hit[0] is interaction:
        return hit[1]
    value = fingerprint(interaction.model_dump(mode="json"))
    with _recent_lock:
        _recent[id(interaction)] = (interaction, value)
        if len(_recent) > _RECENT_SIZE:
            _recent.popitem(last=False)
    return value


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
