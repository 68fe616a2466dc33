"""Scripted scenario manifests (``templiqx.mock/v1alpha1``) and their inventory.

A manifest scripts one runtime call either as lifecycle ``steps`` (request_received,
delay, then exactly one runtime_success or runtime_failure) or as a provider-like event
stream (start, delta/reasoning/usage, finish, end). Loading is strict and fail-closed: an
unknown field, a broken lifecycle or an expectation that contradicts the script is an
``InvalidData`` error, never a silently different scenario.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, JsonValue, model_validator

from ._canonical import fingerprint
from ._contracts import RenderRequest, WireModel
from ._errors import InvalidData
from ._failures import RuntimeFailureCode
from ._loading import load_document, validate_model

__all__ = [
    "MOCK_API_VERSION",
    "Inventory",
    "InventoryEntry",
    "Scenario",
    "ScenarioExpectation",
    "ScenarioManifest",
    "load_inventory",
    "load_scenario",
]

MOCK_API_VERSION = "templiqx.mock/v1alpha1"
OUTPUT_SCHEMA_CODE = "TQX_OUTPUT_SCHEMA"


class ScenarioFailure(WireModel):
    code: RuntimeFailureCode
    detail: str = Field(min_length=1)
    retry_after_ms: int | None = Field(default=None, ge=0)


class _Step(WireModel):
    id: str = Field(min_length=1)


class RequestReceivedStep(_Step):
    kind: Literal["request_received"]


class DelayStep(_Step):
    kind: Literal["delay"]
    delay_ms: int = Field(ge=0)


class RuntimeSuccessStep(_Step):
    kind: Literal["runtime_success"]
    output: JsonValue = None
    output_schema_valid: bool | None = None

    @property
    def has_output(self) -> bool:
        return "output" in self.model_fields_set


class RuntimeFailureStep(_Step):
    kind: Literal["runtime_failure"]
    failure: ScenarioFailure


Step = Annotated[
    RequestReceivedStep | DelayStep | RuntimeSuccessStep | RuntimeFailureStep,
    Field(discriminator="kind"),
]


class StartEvent(WireModel):
    kind: Literal["start"]


class DeltaFixture(WireModel):
    kind: Literal["delta"]
    text: str


class ReasoningFixture(WireModel):
    kind: Literal["reasoning"]
    text: str


class UsageFixture(WireModel):
    kind: Literal["usage"]
    input_tokens: int = Field(ge=0)
    output_tokens: int = Field(ge=0)


class FinishFixture(WireModel):
    kind: Literal["finish"]
    finish_reason: Literal["stop", "length", "content_filter"] = "stop"


class EndEvent(WireModel):
    kind: Literal["end"]


ScenarioStreamEvent = Annotated[
    StartEvent | DeltaFixture | ReasoningFixture | UsageFixture | FinishFixture | EndEvent,
    Field(discriminator="kind"),
]


class EvidenceRef(WireModel):
    document_id: str
    fragment_id: str
    quote_sha256: str


class DocumentExpectation(WireModel):
    status: Literal["not_applicable", "rendered"]
    unresolved_references: int = Field(ge=0)


class ScenarioManifest(WireModel):
    api_version: Literal["templiqx.mock/v1alpha1"]
    id: str = Field(min_length=1)
    contract: str = Field(min_length=1)
    kind: str = Field(min_length=1)
    input: str = Field(min_length=1)
    expected_output: str | None = None
    expected_output_fingerprint: str | None = None
    expected_diagnostics: list[str] = Field(default_factory=list)
    receipt_payload_policy: Literal["fingerprints_only", "no_successful_receipt"]
    steps: list[Step] | None = None
    events: list[ScenarioStreamEvent] | None = None
    expected_status: Literal["success", "failure"]
    expected_failure: str | None = None
    evidence: list[EvidenceRef] = Field(default_factory=list)
    document_expectation: DocumentExpectation
    golden_receipt_fingerprint: str | None = None

    @model_validator(mode="after")
    def _check_lifecycle(self) -> ScenarioManifest:
        if (self.steps is None) == (self.events is None):
            raise ValueError("a scenario has exactly one of `steps` or `events`")
        if self.steps is not None:
            _check_steps(self.steps)
        else:
            assert self.events is not None
            _check_events(self.events)
        self._check_expectations()
        return self

    @property
    def terminal(self) -> RuntimeSuccessStep | RuntimeFailureStep | FinishFixture:
        if self.steps is not None:
            last = self.steps[-1]
            assert isinstance(last, (RuntimeSuccessStep, RuntimeFailureStep))
            return last
        assert self.events is not None
        finish = self.events[-2]
        assert isinstance(finish, FinishFixture)
        return finish

    def _check_expectations(self) -> None:
        terminal = self.terminal
        expected: tuple[str, str | None, str]
        if isinstance(terminal, RuntimeFailureStep):
            expected = ("failure", terminal.failure.code.value, "no_successful_receipt")
        elif isinstance(terminal, FinishFixture) and terminal.finish_reason != "stop":
            code = RuntimeFailureCode.INVALID_RESPONSE.value
            expected = ("failure", code, "no_successful_receipt")
        elif getattr(terminal, "output_schema_valid", None) is False:
            expected = ("failure", OUTPUT_SCHEMA_CODE, "fingerprints_only")
        else:
            expected = ("success", None, "fingerprints_only")
        actual = (self.expected_status, self.expected_failure, self.receipt_payload_policy)
        if actual != expected:
            raise ValueError(
                "expected_status/expected_failure/receipt_payload_policy "
                f"{list(actual)} contradict the script, which gives {list(expected)}"
            )
        wanted = [] if expected[1] is None else [expected[1]]
        if self.expected_diagnostics != wanted:
            raise ValueError(f"expected_diagnostics must be {wanted} for this script")


def _check_steps(steps: list[Any]) -> None:
    if not steps:
        raise ValueError("steps must not be empty")
    ids = [step.id for step in steps]
    if len(set(ids)) != len(ids):
        raise ValueError("step ids must be unique")
    if not isinstance(steps[0], RequestReceivedStep):
        raise ValueError("the first step must be request_received")
    if sum(isinstance(step, RequestReceivedStep) for step in steps) != 1:
        raise ValueError("request_received must occur exactly once")
    terminals = [s for s in steps if isinstance(s, (RuntimeSuccessStep, RuntimeFailureStep))]
    if len(terminals) != 1 or terminals[0] is not steps[-1]:
        raise ValueError("exactly one runtime_success or runtime_failure step, and it is last")


def _check_events(events: list[Any]) -> None:
    kinds = [event.kind for event in events]
    if len(kinds) < 3 or kinds[0] != "start" or kinds[-1] != "end" or kinds[-2] != "finish":
        raise ValueError("events must begin with start and close with finish, end")
    for kind in ("start", "finish", "end"):
        if kinds.count(kind) != 1:
            raise ValueError(f"event {kind} must occur exactly once")


@dataclass(frozen=True)
class Scenario:
    """A loaded manifest with its files resolved: the render request and expected output."""

    manifest: ScenarioManifest
    source: Path
    render_request: RenderRequest
    expected_output: Any = None

    @property
    def id(self) -> str:
        return self.manifest.id


def load_scenario(path: str | Path) -> Scenario:
    """Load a manifest (JSON or YAML) and the files it references, relative to it."""
    source = Path(path)
    manifest = validate_model(ScenarioManifest, load_document(source), name=str(source))
    base = source.parent
    render = validate_model(
        RenderRequest, load_document(base / manifest.input), name=str(base / manifest.input)
    )
    expected_output = None
    if manifest.expected_output is not None:
        expected_output = load_document(base / manifest.expected_output)
        if manifest.expected_output_fingerprint is not None:
            actual = fingerprint(expected_output)
            if actual != manifest.expected_output_fingerprint:
                raise InvalidData(
                    f"{source}: expected_output fingerprints to {actual}, "
                    f"not to expected_output_fingerprint {manifest.expected_output_fingerprint}"
                )
    return Scenario(manifest, source, render, expected_output)


class ScenarioExpectation(WireModel):
    status: Literal["success", "failure"]
    diagnostic_code: str | None
    output_schema_valid: bool | None
    output_fingerprint: str | None
    receipt_fingerprint: str | None = None


class InventoryEntry(WireModel):
    id: str = Field(min_length=1)
    manifest: str = Field(min_length=1)
    expectation: ScenarioExpectation


class Inventory(WireModel):
    api_version: Literal["templiqx.mock/v1alpha1"]
    package: str = Field(min_length=1)
    scenarios: list[InventoryEntry]


def _expectation_conflicts(entry: InventoryEntry, scenario: Scenario) -> list[str]:
    manifest, expect = scenario.manifest, entry.expectation
    terminal = manifest.terminal
    declared_valid = getattr(terminal, "output_schema_valid", None)
    pairs: list[tuple[str, Any, Any]] = [
        ("id", entry.id, manifest.id),
        ("status", expect.status, manifest.expected_status),
        ("diagnostic_code", expect.diagnostic_code, manifest.expected_failure),
        ("output_schema_valid", expect.output_schema_valid, declared_valid),
    ]
    if expect.status == "success":
        pairs.append(
            ("output_fingerprint", expect.output_fingerprint, manifest.expected_output_fingerprint)
        )
    elif expect.output_fingerprint is not None:
        pairs.append(("output_fingerprint", expect.output_fingerprint, None))
    return [f"{name}: inventory says {a!r}, manifest says {b!r}" for name, a, b in pairs if a != b]


def load_inventory(path: str | Path, *, root: str | Path | None = None) -> list[Scenario]:
    """Load an inventory and every manifest it lists; fail closed on any disagreement.

    Manifest paths are relative to ``root`` (default: the inventory's grandparent, the
    layout of ``reference/<package>/scenarios/inventory.json``).
    """
    source = Path(path)
    inventory = validate_model(Inventory, load_document(source), name=str(source))
    base = Path(root) if root is not None else source.parent.parent.parent
    ids = [entry.id for entry in inventory.scenarios]
    if len(set(ids)) != len(ids):
        raise InvalidData(f"{source}: scenario ids must be unique")
    scenarios = []
    for entry in inventory.scenarios:
        scenario = load_scenario(base / entry.manifest)
        conflicts = _expectation_conflicts(entry, scenario)
        if conflicts:
            raise InvalidData(f"{source}: scenario {entry.id}: " + "; ".join(conflicts))
        scenarios.append(scenario)
    return scenarios
