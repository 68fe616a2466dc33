"""What an adapter author needs besides ``templiqx_core`` (a host needs only that).

Implement ``RuntimeAdapter.descriptor`` and ``RuntimeAdapter.produce_output`` (plus
``release`` if the adapter owns resources); the port builds the receipt, maps unexpected
errors, ends every stream with one terminal event and owns the lifecycle. Wrappers
(retrying, repairing, ...) derive from ``WrappingRuntime``. Check the result with
``templiqx_core.conformance``. An adapter's own files (cassettes, fixtures) load with
``load_document``, bounded as contracts are.
"""

from ._canonical import MAX_DEPTH, NotJson
from ._loading import load_document
from ._ports import (
    CallOutcome,
    Produced,
    RuntimeCall,
    WrappingRuntime,
)
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
