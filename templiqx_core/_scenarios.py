"""Scenario manifests (``templiqx.mock/v1alpha1``, the Rust reference mock's shapes and
rules) and their inventory, loaded fail-closed: a wrong fixture fails at loading."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, JsonValue, model_validator

from . import codes
from ._canonical import fingerprint
from ._contracts import RenderRequest, WireModel
from ._errors import InvalidData
from ._failures import RuntimeFailureCode
from ._loading import load_document, validate_model

MOCK_API_VERSION: Final = "templiqx.mock/v1alpha1"

_U64 = Annotated[int, Field(ge=0, le=2**64 - 1)]
_U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
# The code's JSON string names the enum member (serde's renamed unit variants).
FailureCode = Annotated[RuntimeFailureCode, Field(strict=False)]


class RuntimeFailureSpec(WireModel):
    _omit_none = frozenset({"retry_after_ms"})

    code: FailureCode
    retry_after_ms: _U64 | None = None
    detail: str


class ScenarioStep(WireModel):
    """One lifecycle step; which optional fields matter depends on ``kind``."""

    _omit_none = frozenset({"delay_ms", "output", "output_schema_valid", "failure"})

    id: str
    kind: Literal["request_received", "delay", "runtime_success", "runtime_failure"]
    delay_ms: _U64 | None = None
    output: JsonValue = None  # JSON null reads as "no output", as serde's Option<Value>
    output_schema_valid: bool | None = None
    failure: RuntimeFailureSpec | None = None


class MarkerEvent(WireModel):
    kind: Literal["start", "end"]
    id: str


class TextFixture(WireModel):
    kind: Literal["delta", "reasoning"]
    id: str
    text: str


class UsageFixture(WireModel):
    kind: Literal["usage"]
    id: str
    input_tokens: _U64
    output_tokens: _U64


class FinishFixture(WireModel):
    _omit_none = frozenset({"output"})

    kind: Literal["finish"]
    id: str
    output: JsonValue = None
    output_schema_valid: bool = False


ScenarioStreamEvent = Annotated[
    MarkerEvent | TextFixture | UsageFixture | FinishFixture,
    Field(discriminator="kind"),
]


class EvidenceExpectation(WireModel):
    document_id: str
    fragment_id: str
    quote_sha256: str


class DocumentExpectation(WireModel):
    status: str = ""
    unresolved_references: _U32 = 0


class ScenarioManifest(WireModel):
    api_version: str
    id: str
    contract: str
    kind: Literal[
        "happy_path", "ambiguous", "missing", "invalid", "drafting", "failure", "document_warning"
    ]
    input: str | None = None
    expected_output: str | None = None
    expected_output_fingerprint: str | None = None
    expected_diagnostics: list[str] = Field(default_factory=list)
    expected_status: str = ""
    expected_failure: str | None = None
    receipt_payload_policy: Literal["fingerprints_only", "no_successful_receipt"]
    steps: list[ScenarioStep] = Field(default_factory=list)
    events: list[ScenarioStreamEvent] | None = None
    evidence: list[EvidenceExpectation] = Field(default_factory=list)
    document_expectation: DocumentExpectation = Field(default_factory=DocumentExpectation)
    golden_receipt_fingerprint: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ScenarioManifest:
        _check_manifest(self)
        _check_expectations(self)
        return self

    @property
    def declared_schema_valid(self) -> bool | None:
        """The validity the script declares, as the reference inventory check reads it."""
        for step in self.steps:
            if step.kind == "runtime_success":
                return True if step.output_schema_valid is None else step.output_schema_valid
        for event in self.events or ():
            if isinstance(event, FinishFixture):
                return event.output_schema_valid
        return None


def _check_manifest(manifest: ScenarioManifest) -> None:
    """The reference mock's ``ScenarioManifest::validate``, rule for rule."""
    if manifest.api_version != MOCK_API_VERSION:
        raise ValueError(f"unsupported mock api_version '{manifest.api_version}'")
    if not manifest.id.strip() or not manifest.contract.strip():
        raise ValueError("scenario id and contract must be non-empty")
    if (not manifest.steps) == (manifest.events is None):
        raise ValueError("scenario must contain exactly one non-empty steps or events sequence")
    if manifest.events is not None:
        _check_events(manifest.events)
        return
    ids: set[str] = set()
    phase = 0  # 0: before request_received, 1: after it, 2: after the terminal step
    for step in manifest.steps:
        _new_id(step.id, ids, "step")
        if phase == 2:
            raise ValueError(f"step '{step.id}' appears after terminal runtime step")
        if (step.kind == "request_received") != (phase == 0):
            first = "request_received must be the first step"
            raise ValueError(
                first if phase else f"{step.kind} cannot occur before request_received"
            )
        if step.kind == "delay" and not step.delay_ms:
            raise ValueError(f"delay step '{step.id}' must set delay_ms > 0")
        fails = step.kind == "runtime_failure"
        if (fails or step.kind == "runtime_success") and (step.failure is not None) != fails:
            verb = "must include" if fails else "cannot include"
            raise ValueError(f"{step.kind} step '{step.id}' {verb} failure")
        phase = 2 if step.kind.startswith("runtime_") else 1
    if phase != 2:
        raise ValueError("scenario must end in runtime_success or runtime_failure")


def _new_id(item_id: str, ids: set[str], what: str) -> None:
    if not item_id.strip():
        raise ValueError(f"{what} id must be non-empty")
    if item_id in ids:
        raise ValueError(f"duplicate event id '{item_id}'")
    ids.add(item_id)


_TEXT_RULE: Final = "delta/reasoning requires a started, non-empty stream before end"
#: A stream goes through phases 0 (not started), 1 (started), 2 (ended), 3 (finished).
#: Per kind: the phase it may come in, the phase after it, the reference's message otherwise.
_EVENT_PHASES: Final = {
    "start": (0, 1, "stream start must be first and unique"),
    "delta": (1, 1, _TEXT_RULE),
    "reasoning": (1, 1, _TEXT_RULE),
    "usage": (1, 1, "usage requires an active stream"),
    "end": (1, 2, "end requires an active stream"),
    "finish": (2, 3, "finish requires start followed by end"),
}


def _check_events(events: list[Any]) -> None:
    if not events:
        raise ValueError("stream event sequence cannot be empty")
    ids: set[str] = set()
    phase = 0
    for event in events:
        _new_id(event.id, ids, "stream event")
        allowed, phase_after, rule = _EVENT_PHASES[event.kind]
        if phase != allowed or (isinstance(event, TextFixture) and not event.text):
            raise ValueError(rule)
        phase = phase_after
    if phase != 3:
        raise ValueError("stream must contain start, end and finish")


def _check_expectations(manifest: ScenarioManifest) -> None:
    """Beyond the reference: the declared outcome must be the one the script produces."""
    failure = next((s.failure for s in manifest.steps if s.failure is not None), None)
    expected: tuple[str, str | None, str]
    if failure is not None:
        expected = ("failure", failure.code.value, "no_successful_receipt")
    elif manifest.declared_schema_valid is False:
        expected = ("failure", codes.OUTPUT_SCHEMA, "fingerprints_only")
    else:
        expected = ("success", None, "fingerprints_only")
    actual = (manifest.expected_status, manifest.expected_failure, manifest.receipt_payload_policy)
    if actual != expected:
        raise ValueError(
            "expected_status/expected_failure/receipt_payload_policy "
            f"{list(actual)} contradict the script, which gives {list(expected)}"
        )
    wanted = [] if expected[1] is None else [expected[1]]
    if manifest.expected_diagnostics != wanted:
        raise ValueError(f"expected_diagnostics must be {wanted} for this script")


@dataclass(frozen=True)
class Scenario:
    """A loaded manifest with its files resolved; ``expected_output`` is what the reference
    conformance run passes as the request's ``fixture_output``."""

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
    render = RenderRequest()
    if manifest.input is not None:
        request_path = base / manifest.input
        render = validate_model(RenderRequest, load_document(request_path), name=str(request_path))
    expected_output = None
    if manifest.expected_output is not None:
        expected_output = load_document(base / manifest.expected_output)
        wanted = manifest.expected_output_fingerprint
        if wanted is not None and (actual := fingerprint(expected_output)) != wanted:
            raise InvalidData(
                f"{source}: expected_output fingerprints to {actual}, "
                f"not to expected_output_fingerprint {wanted}"
            )
    return Scenario(manifest, source, render, expected_output)


class ScenarioExpectation(WireModel):
    _omit_none = frozenset({"diagnostic_code", "output_schema_valid", "output_fingerprint"})

    status: str
    diagnostic_code: str | None = None
    output_schema_valid: bool | None = None
    output_fingerprint: str | None = None
    receipt_fingerprint: str


def _package_relative(path: str) -> str:
    relative = PurePosixPath(path)
    if relative.is_absolute() or "\\" in path or ".." in relative.parts:
        raise ValueError(f"inventory manifest path is not package-relative: {path}")
    return path


_NonEmpty = Annotated[str, Field(pattern=r"\S")]


class InventoryEntry(WireModel):
    id: _NonEmpty
    manifest: Annotated[_NonEmpty, AfterValidator(_package_relative)]
    expectation: ScenarioExpectation


class Inventory(WireModel):
    api_version: str
    package: str
    scenarios: list[InventoryEntry]

    @model_validator(mode="after")
    def _check(self) -> Inventory:
        if self.api_version != MOCK_API_VERSION:
            raise ValueError(f"unsupported inventory api_version '{self.api_version}'")
        for key in ("id", "manifest"):
            values = [getattr(entry, key) for entry in self.scenarios]
            if duplicate := next((v for v in values if values.count(v) > 1), None):
                raise ValueError(f"duplicate inventory {key} '{duplicate}'")
        return self


def load_inventory(
    path: str | Path, *, package: str | None = None, root: str | Path | None = None
) -> list[Scenario]:
    """Load an inventory and every manifest it lists; fail closed on any disagreement.
    Manifest paths are relative to ``root``, by default the directory holding
    ``<package>/scenarios/inventory.json``."""
    source = Path(path)
    inventory = validate_model(Inventory, load_document(source), name=str(source))
    if package is not None and inventory.package != package:
        raise InvalidData(
            f"{source}: inventory package '{inventory.package}' does not match '{package}'"
        )
    base = Path(root) if root is not None else source.parent.parent.parent
    scenarios = []
    for entry in inventory.scenarios:
        if not (base / entry.manifest).is_file():
            raise InvalidData(f"{source}: inventory manifest is missing: {entry.manifest}")
        scenario = load_scenario(base / entry.manifest)
        manifest, expect = scenario.manifest, entry.expectation
        pairs: list[tuple[str, Any, Any]] = [
            ("id", entry.id, manifest.id),
            ("status", expect.status, manifest.expected_status),
            ("diagnostic_code", expect.diagnostic_code, manifest.expected_failure),
            ("output_schema_valid", expect.output_schema_valid, manifest.declared_schema_valid),
            ("output_fingerprint", expect.output_fingerprint, manifest.expected_output_fingerprint),
        ]
        if conflicts := [
            f"{k}: inventory says {a!r}, manifest says {b!r}" for k, a, b in pairs if a != b
        ]:
            raise InvalidData(f"{source}: scenario {entry.id}: " + "; ".join(conflicts))
        scenarios.append(scenario)
    return scenarios
