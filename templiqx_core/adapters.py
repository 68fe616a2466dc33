"""What an adapter author needs besides ``templiqx_core``: implement ``descriptor`` and
``produce_output`` (the port does the rest), derive wrappers from ``WrappingRuntime``, check
the adapter with ``templiqx_core.conformance``; ``load_document`` reads its own files."""

from ._canonical import MAX_DEPTH, NotJson
from ._loading import load_document
from ._ports import CallOutcome, Produced, RuntimeCall, WrappingRuntime
from ._receipts import build_receipt, request_fingerprint
from ._repair import RepairAttempt, current_repair
from ._runtimes import ENTRY_POINT_GROUP, RuntimeFactory, RuntimeOptions
from ._schema import SchemaValidator, compile_schema

__all__ = [
    "ENTRY_POINT_GROUP",
    "MAX_DEPTH",
    "CallOutcome",
    "NotJson",
    "Produced",
    "RepairAttempt",
    "RuntimeCall",
    "RuntimeFactory",
    "RuntimeOptions",
    "SchemaValidator",
    "WrappingRuntime",
    "build_receipt",
    "compile_schema",
    "current_repair",
    "load_document",
    "request_fingerprint",
]
