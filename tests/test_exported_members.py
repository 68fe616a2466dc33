"""Every public namespace exports exactly what it pins (after httpx's test_exported_members).

A public module is one whose dotted path has no ``_``-prefixed part. Each one's
``__all__`` is pinned below: changing a public API is a deliberate edit of this file.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

import templiqx_core
import templiqx_langfuse

ROOT = Path(__file__).resolve().parents[1]

#: Checks of the source: run once, in the lint step of .ci/run.
pytestmark = pytest.mark.lint

# Modules that only re-export: every public name in them must be exported.
FACADES = {
    "templiqx_core",
    "templiqx_core.adapters",
    "templiqx_core.evals",
    "templiqx_langfuse",
    "templiqx_langfuse.building_blocks",
}

PINNED: dict[str, list[str]] = {
    "templiqx_langfuse.testing": [],
    "templiqx_langfuse.evals": [
        "CaseResult",
        "EvalReport",
        "Summary",
        "arun_eval",
        "assert_eval_passes",
        "baseline_diff",
        "judge_evaluator",
        "read_results",
        "run_eval",
        "stable_item_id",
        "table",
        "write_junit",
    ],
    "templiqx_core": [
        "API_VERSION",
        "AdapterDescriptor",
        "CONTRACT_SCHEMA_PATH",
        "CompileResult",
        "CompiledInteraction",
        "CompiledMessage",
        "CompleteEvent",
        "Contract",
        "DeltaEvent",
        "Diagnostic",
        "EventSink",
        "ExecutionReceipt",
        "ExecutionRequest",
        "FailedEvent",
        "InvalidData",
        "InvalidPath",
        "IoFailure",
        "NotFound",
        "OperationEnvelope",
        "OutputSchemaError",
        "OutputSchemaStrictError",
        "OutputTypeError",
        "PortError",
        "RenderRequest",
        "RepairingRuntime",
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
        "StrictFinding",
        "StrictForm",
        "ToolCallDeltaEvent",
        "TypedContract",
        "TypedContractError",
        "Unsupported",
        "__version__",
        "canonical_json",
        "check_envelope",
        "check_output_model",
        "codes",
        "collect_attempts",
        "compile_contract",
        "compile_envelope",
        "execute_contract",
        "fingerprint",
        "load_inventory",
        "load_scenario",
        "model_output_schema",
        "parse_contract",
        "read_contract",
        "to_diagnostic",
        "to_strict_schema",
    ],
    "templiqx_core.adapters": [
        "CallOutcome",
        "ENTRY_POINT_GROUP",
        "MAX_DEPTH",
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
    ],
    "templiqx_core.evals": [
        "CheckResult",
        "EvalCaseSpec",
        "MAX_REPAIR_ATTEMPTS",
        "Observed",
        "check_case",
        "iter_cases",
        "load_runtime",
    ],
    "templiqx_core.codes": [
        "ALL_CODES",
        "CAPABILITY_UNSUPPORTED",
        "CAS_CONFLICT",
        "COMPONENT_ARGUMENT_MISSING",
        "COMPONENT_ARGUMENT_TYPE",
        "COMPONENT_ARGUMENT_UNKNOWN",
        "COMPONENT_MISSING",
        "CONDITION_TYPE",
        "DATA_INVALID",
        "EXTENSION_NAMESPACE",
        "EXTENSION_SCHEMA",
        "EXTENSION_UNSUPPORTED",
        "FILTER_TYPE",
        "FOR_EACH_TYPE",
        "HOST_RETRY_EXHAUSTED",
        "INTERPOLATION_TYPE",
        "IO",
        "NOT_FOUND",
        "OUTPUT_SCHEMA",
        "OUTPUT_SCHEMA_STRICT",
        "OUTPUT_TYPE",
        "PARSE_YAML",
        "PATH_INVALID",
        "PORT",
        "REF_UNKNOWN",
        "RUNTIME_CAPABILITY_UNSUPPORTED",
        "RUNTIME_CLOSED",
        "RUNTIME_INTERRUPTED",
        "RUNTIME_INVALID_RESPONSE",
        "RUNTIME_PERMANENT",
        "RUNTIME_RATE_LIMITED",
        "RUNTIME_TIMEOUT",
        "RUNTIME_UNAVAILABLE",
        "TEMPLATE_SYNTAX",
        "TEST_FAILED",
        "UNSUPPORTED",
        "VALUE_REQUIRED",
        "VALUE_SCHEMA",
        "VALUE_UNKNOWN",
    ],
    "templiqx_core.conformance": [
        "AssembledToolCall",
        "ConformanceError",
        "StreamRun",
        "assemble_tool_calls",
        "check_adapter",
        "check_cancellation",
        "check_concurrent_use",
        "check_delta_order",
        "check_failure_projection",
        "check_midstream_failure",
        "check_sink_exception_propagates",
        "check_size_bound",
        "check_streaming_parity",
        "check_tool_call_assembly",
        "receipts_equal",
        "run_stream",
        "validate_event_order",
    ],
    "templiqx_langfuse": [
        "ADAPTER_ID",
        "AsyncDeadlineTransport",
        "DeadlineTransport",
        "LangfuseConfig",
        "LangfuseTracedRuntime",
        "ModelConfig",
        "PROMPT_CAPABILITY",
        "PROMPT_EXTENSION",
        "Published",
        "REDACTED",
        "Redactor",
        "RetryingRuntime",
        "TraceRef",
        "TracedReceipt",
        "Usage",
        "__version__",
        "collect_traces",
        "load_contract",
        "promote_label",
        "publish_contract",
        "trace_attributes",
    ],
    "templiqx_langfuse.building_blocks": [
        "Completion",
        "HostWiring",
        "MAX_RESPONSE_BYTES",
        "WireFailure",
        "WiringOptions",
        "aopen_bounded",
        "deadline_at",
        "failure_for_status",
        "open_bounded",
        "parse_completion",
    ],
    "templiqx_langfuse.testing.cassettes": [
        "ActiveCassette",
        "CassetteMiss",
        "LOOPBACK_REPLAY_HOST",
        "SCRUBBED_REQUEST_HEADERS",
        "SCRUBBED_RESPONSE_HEADERS",
        "Scrubber",
        "ScrubbingPersister",
        "UnplayedInteractions",
        "cassette_config",
        "cassette_miss",
        "no_match_error",
        "open_cassette",
    ],
    "templiqx_langfuse.testing.plugin": [
        "langfuse_span_exporter",
        "pytest_recording_configure",
        "pytest_runtest_makereport",
        "pytest_runtest_setup",
        "templiqx_replay_runtime",
        "templiqx_vcr_config",
    ],
    "templiqx_langfuse.testing.replay": [
        "ReplayingRuntime",
        "cli_replay",
        "recorded_endpoint",
        "replaying_runtime",
    ],
}


def public_modules() -> list[str]:
    names = []
    for package in (templiqx_core, templiqx_langfuse):
        names.append(package.__name__)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return sorted(names)


def test_every_public_module_is_pinned() -> None:
    assert public_modules() == sorted(PINNED)


@pytest.mark.parametrize("name", sorted(PINNED))
def test_exported_members(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(getattr(module, "__all__", []))
    assert sorted(exported) == PINNED[name]
    assert len(set(exported)) == len(exported)
    missing = [member for member in exported if not hasattr(module, member)]
    assert missing == []
    public = {  # dir(): a lazily loading package (PEP 562) lists what it can load
        key
        for key in dir(module)
        if (not key.startswith("_") or key == "__version__")
        and not isinstance(getattr(module, key), types.ModuleType)
    } - {"annotations"}
    modules = {key for key in exported if isinstance(getattr(module, key), types.ModuleType)}
    if name in FACADES:  # (a submodule is an attribute once imported: judged by the pin)
        assert public == set(exported) - modules
    else:  # what the module defines itself is exported, or named with a leading _
        defined = {
            key
            for key in public
            if (inspect.isfunction(getattr(module, key)) or inspect.isclass(getattr(module, key)))
            and getattr(module, key).__module__ == name
        }
        assert defined <= set(exported), sorted(defined - set(exported))


@pytest.mark.slow
def test_type_checkers_reject_a_misspelled_public_name(tmp_path: Path) -> None:
    """The namespaces load names lazily at run time, yet a type checker sees the real
    names: a typo is an error, not an ``Any``."""
    script = tmp_path / "host.py"
    script.write_text(
        "from templiqx_core import ExecutionReqest\n"
        "from templiqx_langfuse import LangfuseConfg\n"
        "from templiqx_core import ExecutionRequest\n",
        "utf-8",
    )
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "c"), str(script)],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=False,
    )  # fmt: skip
    errors = [line for line in result.stdout.splitlines() if ": error:" in line]
    assert [line.split(": error: ")[1].split(";")[0] for line in errors] == [
        'Module "templiqx_core" has no attribute "ExecutionReqest"',
        'Module "templiqx_langfuse" has no attribute "LangfuseConfg"',
    ]


DOCUMENTED = re.findall(r"^::: (\S+)$", (ROOT / "docs" / "api.md").read_text("utf-8"), re.M)


@pytest.mark.parametrize("name", DOCUMENTED)
def test_the_api_reference_sees_exactly_what_a_namespace_exports(name: str) -> None:
    """mkdocstrings reads ``__all__`` statically (griffe): one computed at run time renders an
    empty page, or every private helper of the module."""
    griffe = pytest.importorskip("griffe")
    module = griffe.load(name, search_paths=[str(ROOT)])
    exports = module.exports
    if name == "templiqx_core.codes":  # every constant is a code: the page lists them by name
        exports = [member for member in module.members if member.isupper()]
    assert exports is not None
    assert sorted(map(str, exports)) == sorted(importlib.import_module(name).__all__)
