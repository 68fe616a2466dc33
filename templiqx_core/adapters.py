"""What an adapter author needs besides ``templiqx_core`` (a host needs only that).

Implement ``RuntimeAdapter.descriptor`` and ``RuntimeAdapter.produce_output`` (plus
``release`` if the adapter owns resources); the port builds the receipt, maps unexpected
errors, ends every stream with one terminal event and owns the lifecycle. Wrappers
(retrying, repairing, ...) derive from ``WrappingRuntime``. Check the result with
``templiqx_core.conformance``. An adapter's own files (cassettes, fixtures) load with
``load_document``, bounded as contracts are.
"""

from ._canonical import MAX_DEPTH as MAX_DEPTH
from ._canonical import NotJson as NotJson
from ._loading import load_document as load_document
from ._ports import CallOutcome as CallOutcome
from ._ports import Produced as Produced
from ._ports import RuntimeCall as RuntimeCall
from ._ports import WrappingRuntime as WrappingRuntime
from ._ports import failed_event as failed_event
from ._ports import project_terminal as project_terminal
from ._receipts import build_receipt as build_receipt
from ._receipts import request_fingerprint as request_fingerprint
from ._repair import RepairAttempt as RepairAttempt
from ._repair import current_repair as current_repair
from ._runtimes import ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from ._runtimes import RuntimeFactory as RuntimeFactory
from ._runtimes import RuntimeOptions as RuntimeOptions
from ._schema import SchemaValidator as SchemaValidator
from ._schema import compile_schema as compile_schema

__all__ = [name for name in dir() if not name.startswith("_")]
