"""execute_contract: gates, envelopes, streaming delivery, as the reference application."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from templiqx_core import (
    ExecutionReceipt,
    OperationEnvelope,
    RenderRequest,
    RuntimeFailureCode,
    ScriptedFailure,
    ScriptedRuntime,
    ScriptedSuccess,
    StreamEvent,
    compile_envelope,
    execute_contract,
    fingerprint,
)

REQUEST = RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"})


@pytest.fixture
def greeting_contract(reference_dir: Path) -> Path:
    return reference_dir / "demo" / "greeting.yaml"


def run(
    contract: Path, runtime: ScriptedRuntime, **options: Any
) -> OperationEnvelope[ExecutionReceipt]:
    """execute_contract on the greeting request; fixture output and capabilities by default."""
    defaults: dict[str, Any] = {
        "capabilities": ["structured_output"],
        "fixture_output": {"greeting": "Hi"},
    }
    return execute_contract(contract, REQUEST, runtime=runtime, **{**defaults, **options})


def test_streaming_delivers_events_live_and_lists_them(greeting_contract: Path) -> None:
    runtime = ScriptedRuntime([ScriptedSuccess(deltas=('{"greeting"', ': "Hi"}'))])
    seen: list[StreamEvent] = []
    envelope = run(greeting_contract, runtime, stream=True, on_event=seen.append)
    assert envelope.ok
    assert [e.kind for e in seen] == ["Delta", "Delta", "Complete"]
    assert envelope.stream_events == seen
    assert envelope.result is not None
    assert envelope.fingerprints == {
        "request": envelope.result.request_fingerprint,
        "output": envelope.result.output_fingerprint,
    }


def test_non_streaming_has_no_stream_events(greeting_contract: Path) -> None:
    envelope = run(greeting_contract, ScriptedRuntime([ScriptedSuccess()]))
    assert envelope.ok
    assert "stream_events" not in envelope.model_dump(mode="json")


def test_on_event_exception_cancels_the_execution(greeting_contract: Path) -> None:
    class Stop(Exception):
        pass

    def cancel(event: StreamEvent) -> None:
        raise Stop

    with pytest.raises(Stop):
        run(
            greeting_contract,
            ScriptedRuntime([ScriptedSuccess(deltas=("x",))]),
            stream=True,
            on_event=cancel,
        )


def test_runtime_failure_becomes_one_diagnostic_with_help(greeting_contract: Path) -> None:
    runtime = ScriptedRuntime(
        [ScriptedFailure(RuntimeFailureCode.RATE_LIMITED, "busy", retry_after_ms=300, id="s-1")]
    )
    seen: list[StreamEvent] = []
    envelope = run(
        greeting_contract, runtime, fixture_output=None, stream=True, on_event=seen.append
    )
    assert not envelope.ok
    (diagnostic,) = envelope.diagnostics
    assert diagnostic.code == "TQX_RUNTIME_RATE_LIMITED"
    assert diagnostic.help is not None
    assert diagnostic.message == "runtime failure TQX_RUNTIME_RATE_LIMITED: busy"
    assert diagnostic.json_pointer == ""
    assert diagnostic.help == (
        "adapter=templiqx-scripted-runtime version=0.2.0 scenario=s-1 retry_after_ms=300 "
        "fingerprint="
        + fingerprint({"id": "s-1", "code": "TQX_RUNTIME_RATE_LIMITED", "retry_after_ms": 300})
    )
    # The host saw the Failed event live; the reference's failure envelope keeps none,
    # and no fingerprints (port_failure).
    assert [e.kind for e in seen] == ["Failed"]
    assert envelope.stream_events == []
    assert envelope.fingerprints == {}
    assert envelope.result is None


def test_schema_invalid_output_is_not_ok_but_keeps_the_receipt(greeting_contract: Path) -> None:
    envelope = run(
        greeting_contract, ScriptedRuntime([ScriptedSuccess()]), fixture_output={"nope": 1}
    )
    assert not envelope.ok
    assert {d.code for d in envelope.diagnostics} == {"TQX_OUTPUT_SCHEMA"}
    assert envelope.diagnostics[0].message == "runtime output does not satisfy the contract schema"
    assert envelope.result is not None
    assert envelope.result.output_schema_valid is False


def test_runtime_lacking_a_capability_is_refused(greeting_contract: Path) -> None:
    runtime = ScriptedRuntime([ScriptedSuccess(delay_ms=5)], capabilities=["text"])
    envelope = run(greeting_contract, runtime)
    assert [d.to_json() for d in envelope.diagnostics] == [
        {
            "code": "TQX_RUNTIME_CAPABILITY_UNSUPPORTED",
            "severity": "error",
            "message": "runtime lacks 'structured_output'",
            "json_pointer": "/capabilities",
        }
    ]
    assert envelope.fingerprints == {}
    assert runtime.now_ms == 0  # refused before executing: the scripted delay never ran


def test_compile_envelope(greeting_contract: Path) -> None:
    envelope = compile_envelope(greeting_contract, REQUEST, capabilities=["structured_output"])
    assert envelope.ok
    assert envelope.operation == "compile_contract"
    assert envelope.result is not None
    assert envelope.fingerprints == {"compiled_interaction": fingerprint(envelope.result.to_json())}
