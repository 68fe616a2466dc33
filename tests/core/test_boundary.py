"""The core stays provider-neutral, and its public API is a pinned contract."""

from __future__ import annotations

import json
import subprocess
import sys

import templiqx_core

FORBIDDEN = ("langfuse", "httpx", "vcr", "openai", "templiqx_langfuse", "mcp")


def test_core_imports_no_provider_or_tracing_package() -> None:
    code = (
        "import json, sys\n"
        "import templiqx_core, templiqx_core._cli, templiqx_core.conformance\n"
        "import templiqx_core._application, templiqx_core._compiler, templiqx_core._runtimes\n"
        "print(json.dumps(sorted(sys.modules)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    loaded = json.loads(result.stdout)
    leaked = [m for m in loaded if m.split(".")[0] in FORBIDDEN]
    assert leaked == []


def test_public_api_is_pinned() -> None:
    assert templiqx_core.__all__ == [
        "API_VERSION",
        "AdapterDescriptor",
        "CompileResult",
        "CompiledInteraction",
        "CompiledMessage",
        "CompleteEvent",
        "Conflict",
        "Contract",
        "DeltaEvent",
        "Diagnostic",
        "EvalResult",
        "EventSink",
        "ExecutionReceipt",
        "ExecutionRequest",
        "FailedEvent",
        "InvalidData",
        "InvalidPath",
        "IoFailure",
        "NotFound",
        "OperationEnvelope",
        "PortError",
        "RenderRequest",
        "Role",
        "RuntimeAdapter",
        "RuntimeClosed",
        "RuntimeFailure",
        "RuntimeFailureCode",
        "RuntimeFailureError",
        "Scenario",
        "ScriptedFailure",
        "ScriptedOutcome",
        "ScriptedRuntime",
        "ScriptedSuccess",
        "SourceSpan",
        "StreamEvent",
        "ToolCallDeltaEvent",
        "Unsupported",
        "__version__",
        "build_receipt",
        "canonical_json",
        "codes",
        "compile_contract",
        "compile_envelope",
        "compile_schema",
        "execute_contract",
        "failure_receipt_fingerprint",
        "fingerprint",
        "fingerprint_bytes",
        "load_inventory",
        "load_scenario",
        "parse_stream_event",
        "request_fingerprint",
        "run_evals",
        "success_receipt_fingerprint",
        "to_diagnostic",
    ]
    for name in templiqx_core.__all__:
        assert hasattr(templiqx_core, name), name
