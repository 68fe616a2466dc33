"""A deterministic scripted runtime: the reference fake for tests, evals and demos.

It never sleeps and never touches the network. Scripted delays advance a virtual clock;
scripted deltas are replayed on the streaming path before the terminal event, whose
receipt is exactly what ``execute`` returns for the same request.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

from ._contracts import AdapterDescriptor, DeltaEvent
from ._errors import InvalidData, Unsupported
from ._failures import RuntimeFailure, RuntimeFailureCode, RuntimeFailureError
from ._ports import RuntimeAdapter, RuntimeCall
from ._runtimes import RuntimeOptions
from ._scenarios import (
    DelayStep,
    DeltaFixture,
    FinishFixture,
    RuntimeFailureStep,
    RuntimeSuccessStep,
    Scenario,
    load_scenario,
)
from ._schema import compile_schema
from ._version import __version__

__all__ = [
    "SCRIPTED_ADAPTER_ID",
    "ScriptedFailure",
    "ScriptedOutcome",
    "ScriptedRuntime",
    "ScriptedSuccess",
    "VirtualClock",
    "runtime_factory",
]

SCRIPTED_ADAPTER_ID = "templiqx-scripted-runtime"
_NO_OUTPUT: Any = object()


@dataclass(frozen=True)
class ScriptedSuccess:
    """Succeed with ``output`` (default: the request's ``fixture_output``)."""

    output: Any = _NO_OUTPUT
    deltas: tuple[str, ...] = ()
    delay_ms: int = 0
    expect_schema_valid: bool | None = None


@dataclass(frozen=True)
class ScriptedFailure:
    """Fail with a stable runtime code."""

    code: RuntimeFailureCode
    detail: str
    retry_after_ms: int | None = None
    deltas: tuple[str, ...] = ()
    delay_ms: int = 0


ScriptedOutcome = Union[ScriptedSuccess, ScriptedFailure]


@dataclass
class VirtualClock:
    """Milliseconds of scripted time; advanced by delays, never by sleeping."""

    now_ms: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def advance(self, delay_ms: int) -> int:
        with self._lock:
            self.now_ms += delay_ms
            return self.now_ms


def _outcome_from_scenario(scenario: Scenario) -> ScriptedOutcome:
    manifest = scenario.manifest
    delay = 0
    deltas: tuple[str, ...] = ()
    if manifest.steps is not None:
        delay = sum(step.delay_ms for step in manifest.steps if isinstance(step, DelayStep))
    else:
        assert manifest.events is not None
        deltas = tuple(e.text for e in manifest.events if isinstance(e, DeltaFixture))
    terminal = manifest.terminal
    if isinstance(terminal, RuntimeFailureStep):
        failure = terminal.failure
        return ScriptedFailure(
            failure.code, failure.detail, failure.retry_after_ms, deltas, delay_ms=delay
        )
    if isinstance(terminal, FinishFixture) and terminal.finish_reason != "stop":
        detail = f"model stopped with finish_reason {terminal.finish_reason}"
        return ScriptedFailure(RuntimeFailureCode.INVALID_RESPONSE, detail, deltas=deltas)
    output = _NO_OUTPUT
    if isinstance(terminal, RuntimeSuccessStep) and terminal.has_output:
        output = terminal.output
    elif scenario.expected_output is not None:
        output = scenario.expected_output
    elif deltas:
        try:
            output = json.loads("".join(deltas))
        except json.JSONDecodeError:
            detail = "scripted deltas do not form a JSON document"
            return ScriptedFailure(RuntimeFailureCode.INVALID_RESPONSE, detail, deltas=deltas)
    expect = terminal.output_schema_valid if isinstance(terminal, RuntimeSuccessStep) else None
    return ScriptedSuccess(output, deltas, delay, expect)


class ScriptedRuntime(RuntimeAdapter):
    """Replays scripted outcomes in order; the last one repeats once the script runs out."""

    def __init__(
        self,
        outcomes: Sequence[ScriptedOutcome],
        *,
        capabilities: Sequence[str] = ("structured_output",),
        scenario_id: str | None = None,
        timeout_ms: int | None = None,
        clock: VirtualClock | None = None,
    ) -> None:
        if not outcomes:
            raise InvalidData("ScriptedRuntime needs at least one scripted outcome")
        self._outcomes = list(outcomes)
        self._next = 0
        self._lock = threading.Lock()
        self._descriptor = AdapterDescriptor(
            id=SCRIPTED_ADAPTER_ID,
            version=__version__,
            capabilities=sorted(set(capabilities)),
        )
        self.scenario_id = scenario_id
        self.timeout_ms = timeout_ms
        self.clock = clock or VirtualClock()

    @classmethod
    def from_scenario(cls, scenario: Scenario | str | Path, **kwargs: Any) -> ScriptedRuntime:
        """Build from a loaded scenario or a manifest path (JSON or YAML)."""
        if not isinstance(scenario, Scenario):
            scenario = load_scenario(scenario)
        return cls([_outcome_from_scenario(scenario)], scenario_id=scenario.id, **kwargs)

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def _take(self) -> ScriptedOutcome:
        with self._lock:
            outcome = self._outcomes[min(self._next, len(self._outcomes) - 1)]
            self._next += 1
            return outcome

    def _fail(self, code: RuntimeFailureCode, detail: str, retry_after_ms: int | None) -> None:
        failure = RuntimeFailure.for_adapter(
            self._descriptor,
            code,
            detail,
            retry_after_ms=retry_after_ms,
            scenario_id=self.scenario_id,
        )
        raise RuntimeFailureError(failure)

    def produce_output(self, call: RuntimeCall) -> Any:
        """Replay the next scripted outcome: its deltas (when streaming), then its result.

        The port builds the receipt, so ``execute`` and the ``Complete`` event agree.
        """
        outcome = self._take()
        for text in outcome.deltas:
            call.emit(DeltaEvent(text=text))
        self.clock.advance(outcome.delay_ms)
        if self.timeout_ms is not None and outcome.delay_ms > self.timeout_ms:
            detail = (
                f"scripted delay of {outcome.delay_ms} ms exceeds the {self.timeout_ms} ms timeout"
            )
            self._fail(RuntimeFailureCode.TIMEOUT, detail, None)
        if isinstance(outcome, ScriptedFailure):
            self._fail(outcome.code, outcome.detail, outcome.retry_after_ms)
        assert isinstance(outcome, ScriptedSuccess)
        request = call.request
        output = outcome.output
        if output is _NO_OUTPUT:
            if request.fixture_output is None:
                raise InvalidData(
                    "scripted success has no output: give the request a fixture_output "
                    "or the script an output"
                )
            output = request.fixture_output
        expected = outcome.expect_schema_valid
        if expected is not None:
            valid = compile_schema(request.interaction.output_schema).is_valid(output)
            if valid != expected:
                raise InvalidData(
                    f"scenario {self.scenario_id or '-'} declares output_schema_valid="
                    f"{expected}, but the output validates as {valid}"
                )
        return output


def runtime_factory(options: RuntimeOptions) -> ScriptedRuntime:
    """Entry point ``scripted``: a scenario's script, or succeed with the fixture output."""
    if options.replay is not None:
        raise Unsupported("the scripted runtime does not replay cassettes; use --scenario")
    if options.scenario is not None:
        return ScriptedRuntime.from_scenario(options.scenario)
    return ScriptedRuntime([ScriptedSuccess()])
