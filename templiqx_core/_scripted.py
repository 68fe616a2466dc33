"""The reference mock (``templiqx-mock``), receipt for receipt: scripted time, no network."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import orjson

from ._canonical import fingerprint
from ._contracts import AdapterDescriptor, DeltaEvent
from ._errors import InvalidData, Unsupported
from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError
from ._ports import Produced, RuntimeAdapter, RuntimeCall
from ._runtimes import RuntimeOptions
from ._scenarios import (
    FinishFixture,
    Scenario,
    ScenarioManifest,
    ScenarioStreamEvent,
    TextFixture,
    UsageFixture,
    load_scenario,
)
from ._version import REFERENCE_VERSION

SCRIPTED_ADAPTER_ID = "templiqx-scripted-runtime"
_NO_OUTPUT: Any = object()


@dataclass(frozen=True)
class ScriptedSuccess:
    """Succeed with ``output`` (default: ``fixture_output``) or a model's ``text`` (repair)."""

    output: Any = _NO_OUTPUT
    deltas: tuple[str, ...] = ()
    delay_ms: int = 0
    expect_schema_valid: bool | None = None
    text: str | None = None


@dataclass(frozen=True)
class ScriptedFailure:
    """Fail with a stable runtime code; ``id`` names the step (default: the code)."""

    code: RuntimeFailureCode
    detail: str
    retry_after_ms: int | None = None
    deltas: tuple[str, ...] = ()
    delay_ms: int = 0
    id: str | None = None


ScriptedOutcome = Union[ScriptedSuccess, ScriptedFailure]


def _events_output(events: list[ScenarioStreamEvent], fixture_output: Any) -> Any:
    """The mock's output for an events stream: finish output, fixture, or the aggregate."""
    finish = next((e.output for e in events if isinstance(e, FinishFixture)), None)
    output = fixture_output if finish is None else finish
    if output is not None:
        return output
    texts = [e for e in events if isinstance(e, TextFixture)]
    usage = [e for e in events if isinstance(e, UsageFixture)]
    return {
        "text": "".join(e.text for e in texts if e.kind == "delta"),
        "reasoning": "".join(e.text for e in texts if e.kind == "reasoning"),
        "usage": {
            "input_tokens": sum(e.input_tokens for e in usage),
            "output_tokens": sum(e.output_tokens for e in usage),
        },
    }


class ScriptedRuntime(RuntimeAdapter):
    """Replays scripted outcomes in order (the last repeats), or plays one manifest per call."""

    def __init__(
        self,
        outcomes: Sequence[ScriptedOutcome],
        *,
        capabilities: Sequence[str] = ("structured_output",),
        timeout_ms: int | None = None,
    ) -> None:
        if not outcomes:
            raise InvalidData("ScriptedRuntime needs at least one scripted outcome")
        self._outcomes = list(outcomes)
        self._manifest: ScenarioManifest | None = None
        self._calls = itertools.count()  # next() is atomic: concurrent calls take in turn
        self._descriptor = AdapterDescriptor(
            id=SCRIPTED_ADAPTER_ID,
            version=REFERENCE_VERSION,
            capabilities=sorted(set(capabilities)),
        )
        self.timeout_ms = timeout_ms
        self.now_ms = 0  # scripted time: delays advance it, nothing sleeps
        self._clock = threading.Lock()

    @classmethod
    def from_scenario(cls, scenario: Scenario | str | Path, **kwargs: Any) -> ScriptedRuntime:
        """Build from a loaded scenario or a manifest path (JSON or YAML)."""
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        runtime = cls([ScriptedSuccess()], **kwargs)
        runtime._manifest = scenario.manifest
        return runtime

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def _advance(self, delay_ms: int) -> None:
        with self._clock:
            self.now_ms += delay_ms

    def _fail(
        self, step_id: str, code: RuntimeFailureCode, detail: str, retry_after_ms: int | None
    ) -> RuntimeFailureError:
        """A failure fingerprinted by its step, code and retry hint, as the mock does."""
        stamp = fingerprint({"id": step_id, "code": code.value, "retry_after_ms": retry_after_ms})
        return RuntimeFailureError(
            RuntimeFailure.for_adapter(
                self._descriptor,
                code,
                detail,
                scenario_id=step_id,
                retry_after_ms=retry_after_ms,
                fingerprint=stamp,
            )
        )

    def _play_manifest(self, manifest: ScenarioManifest, call: RuntimeCall) -> Produced:
        """The reference mock's ``execute`` for a manifest (deltas first when streaming)."""
        fixture_output = call.request.fixture_output
        valid = manifest.declared_schema_valid
        if manifest.events is not None:
            for event in manifest.events:
                if isinstance(event, TextFixture) and event.kind == "delta":
                    call.emit(DeltaEvent(text=event.text))
            output = _events_output(manifest.events, fixture_output)
            return Produced(output, output_schema_valid=valid)
        for step in manifest.steps:
            if step.kind == "delay":
                self._advance(step.delay_ms or 0)
            elif step.kind == "runtime_success":
                output = fixture_output if step.output is None else step.output
                return Produced(output, output_schema_valid=valid)
            elif step.kind == "runtime_failure" and step.failure is not None:
                spec = step.failure
                raise self._fail(step.id, spec.code, spec.detail, spec.retry_after_ms)
        raise InvalidData("mock scenario has no terminal step")

    def produce_output(self, call: RuntimeCall) -> Any:
        """Play the manifest, or the next scripted outcome (the last repeats)."""
        if self._manifest is not None:
            return self._play_manifest(self._manifest, call)
        outcome = self._outcomes[min(next(self._calls), len(self._outcomes) - 1)]
        for text in outcome.deltas:
            call.emit(DeltaEvent(text=text))
        self._advance(outcome.delay_ms)
        if self.timeout_ms is not None and outcome.delay_ms > self.timeout_ms:
            timeout = RuntimeFailureCode.TIMEOUT
            detail = f"scripted delay {outcome.delay_ms} ms exceeds timeout {self.timeout_ms} ms"
            raise self._fail(timeout.value, timeout, detail, None)
        if isinstance(outcome, ScriptedFailure):
            step_id = outcome.id or outcome.code.value
            raise self._fail(step_id, outcome.code, outcome.detail, outcome.retry_after_ms)
        output = outcome.output
        if outcome.text is not None:
            try:
                output = orjson.loads(outcome.text)
            except orjson.JSONDecodeError:
                code, detail = RuntimeFailureCode.INVALID_RESPONSE, "message content is not JSON"
                failure = RuntimeFailure.for_adapter(
                    self._descriptor, code, detail, answer=outcome.text
                )
                raise RuntimeFailureError(failure) from None
        if output is _NO_OUTPUT:
            output = call.request.fixture_output
            if output is None and outcome.expect_schema_valid is None:
                raise InvalidData("scripted success has no output (nor a fixture_output)")
        return Produced(output, output_schema_valid=outcome.expect_schema_valid)


def runtime_factory(options: RuntimeOptions) -> ScriptedRuntime:
    """Entry point ``scripted``: a scenario's script, or succeed with the fixture output."""
    if options.replay is not None:
        raise Unsupported("the scripted runtime does not replay cassettes; use --scenario")
    if options.scenario is not None:
        return ScriptedRuntime.from_scenario(options.scenario)
    return ScriptedRuntime([ScriptedSuccess()])
