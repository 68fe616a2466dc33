"""A compile result as the wire models lay it out, without pydantic (the CLI's ``compile``).

``compile_envelope_data`` returns the JSON object ``_application.compile_envelope`` would
serialize (``OperationEnvelope[CompiledInteraction]``): fields in declaration order, ``None``
fields omitted where ``Diagnostic`` omits them, JSON-value maps with sorted keys. Written
with ``_serde.wire_json`` it gives the same bytes as the model's ``model_dump_json``; the
CLI tests compare the two on every contract in the repository.
"""

from __future__ import annotations

from typing import Any, Final

from .._canonical import fingerprint
from .._serde import sort_keys
from .core import PlainResult

__all__ = ["API_VERSION", "COMPILE_OPERATION", "compile_envelope_data", "wire_diagnostic"]

API_VERSION: Final = "templiqx/v1alpha1"
COMPILE_OPERATION: Final = "compile_contract"
_DIAGNOSTIC_FIELDS: Final = ("code", "severity", "message", "file", "json_pointer", "span", "help")


def wire_diagnostic(diagnostic: dict[str, Any]) -> dict[str, Any]:
    """A plain diagnostic in ``Diagnostic``'s field order, its ``None`` fields omitted."""
    return {k: diagnostic[k] for k in _DIAGNOSTIC_FIELDS if diagnostic.get(k) is not None}


def _wire_interaction(interaction: dict[str, Any]) -> dict[str, Any]:
    return {
        "compiler": interaction["compiler"],
        "contract_id": interaction["contract_id"],
        "contract_version": interaction["contract_version"],
        "messages": [{"role": m["role"], "content": m["content"]} for m in interaction["messages"]],
        "output_schema": sort_keys(interaction["output_schema"]),
        "required_capabilities": interaction["required_capabilities"],
        "target_capabilities": interaction["target_capabilities"],
        "runtime_policy": sort_keys(interaction["runtime_policy"]),
        "extensions": sort_keys(interaction["extensions"]),
    }


def compile_envelope_data(result: PlainResult) -> dict[str, Any]:
    """The ``compile_contract`` envelope: the interaction and its fingerprint, or the
    diagnostics (``ok`` unless one is an error, as ``OperationEnvelope::new``)."""
    if result.interaction is None:
        diagnostics = [wire_diagnostic(d) for d in result.diagnostics]
        return {
            "api_version": API_VERSION,
            "operation": COMPILE_OPERATION,
            "ok": not any(d["severity"] == "error" for d in diagnostics),
            "diagnostics": diagnostics,
            "fingerprints": {},
        }
    interaction = _wire_interaction(result.interaction)
    return {
        "api_version": API_VERSION,
        "operation": COMPILE_OPERATION,
        "ok": True,
        "result": interaction,
        "diagnostics": [],
        "fingerprints": {"compiled_interaction": fingerprint(interaction)},
    }
