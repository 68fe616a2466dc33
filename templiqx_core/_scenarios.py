"""Scenario manifests and inventories (``templiqx.mock/v1alpha1``), loaded fail-closed."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Final, Literal

from pydantic import AfterValidator, Field, JsonValue, model_validator

from ._contracts import RenderRequest, WireModel
from ._errors import InvalidData
from ._failures import RuntimeFailureCode
from ._loading import load_document, validate_model

_U64 = Annotated[int, Field(ge=0, le=2**64 - 1)]
_U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]
_NonEmpty = Annotated[str, Field(pattern=r"\S")]
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

    id: _NonEmpty
    kind: Literal["request_received", "delay", "runtime_success", "runtime_failure"]
    delay_ms: _U64 | None = None
    output: JsonValue = None  # JSON null reads as "no output", as serde's Option<Value>
    output_schema_valid: bool | None = None
    failure: RuntimeFailureSpec | None = None

    @model_validator(mode="after")
    def _check(self) -> ScenarioStep:
        if self.kind == "delay" and not self.delay_ms:
            raise ValueError(f"delay step '{self.id}' must set delay_ms > 0")
        fails = self.kind == "runtime_failure"
        if self.kind.startswith("runtime_") and (self.failure is not None) != fails:
            raise ValueError(f"{self.kind} step '{self.id}' must include failure only on failure")
        return self


class MarkerEvent(WireModel):
    kind: Literal["start", "end"]
    id: _NonEmpty


class TextFixture(WireModel):
    kind: Literal["delta", "reasoning"]
    id: _NonEmpty
    text: Annotated[str, Field(min_length=1)]


class UsageFixture(WireModel):
    kind: Literal["usage"]
    id: _NonEmpty
    input_tokens: _U64
    output_tokens: _U64


class FinishFixture(WireModel):
    _omit_none = frozenset({"output"})

    kind: Literal["finish"]
    id: _NonEmpty
    output: JsonValue = None
    output_schema_valid: bool = False


ScenarioStreamEvent = Annotated[
    MarkerEvent | TextFixture | UsageFixture | FinishFixture, Field(discriminator="kind")
]


class EvidenceExpectation(WireModel):
    document_id: str
    fragment_id: str
    quote_sha256: str


class DocumentExpectation(WireModel):
    status: str = ""
    unresolved_references: _U32 = 0


#: Per kind: the phase it may come in, the phase after it. Steps: before request_received,
#: after it, after the terminal step; events: not started, started, ended, finished.
_PHASES: Final = {
    "request_received": (0, 1),
    "delay": (1, 1),
    "runtime_success": (1, 2),
    "runtime_failure": (1, 2),
    "start": (0, 1),
    "delta": (1, 1),
    "reasoning": (1, 1),
    "usage": (1, 1),
    "end": (1, 2),
    "finish": (2, 3),
}


class ScenarioManifest(WireModel):
    api_version: Literal["templiqx.mock/v1alpha1"]
    id: _NonEmpty
    contract: _NonEmpty
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
        """The reference's ``ScenarioManifest::validate``: ids unique, each kind in its phase."""
        if (not self.steps) == (self.events is None):
            raise ValueError("scenario must contain exactly one non-empty steps or events sequence")
        sequence: list[Any] = self.steps or self.events or []
        ids: set[str] = set()
        phase = 0
        for item in sequence:
            allowed, after = _PHASES[item.kind]
            if item.id in ids:
                raise ValueError(f"duplicate id '{item.id}'")
            if phase != allowed:
                raise ValueError(f"'{item.id}' ({item.kind}) is out of order")
            ids.add(item.id)
            phase = after
        if phase != (3 if self.events else 2):
            raise ValueError(
                "steps must end in runtime_success or runtime_failure, events in finish"
            )
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


@dataclass(frozen=True)
class Scenario:
    """A loaded manifest; ``expected_output`` is the request's ``fixture_output`` in a run."""

    manifest: ScenarioManifest
    source: Path
    render_request: RenderRequest
    expected_output: Any = None


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


class InventoryEntry(WireModel):
    id: _NonEmpty
    manifest: Annotated[_NonEmpty, AfterValidator(_package_relative)]
    expectation: ScenarioExpectation


class Inventory(WireModel):
    api_version: Literal["templiqx.mock/v1alpha1"]
    package: str
    scenarios: list[InventoryEntry]

    @model_validator(mode="after")
    def _check(self) -> Inventory:
        for key in ("id", "manifest"):
            values = [getattr(entry, key) for entry in self.scenarios]
            if duplicate := next((v for v in values if values.count(v) > 1), None):
                raise ValueError(f"duplicate inventory {key} '{duplicate}'")
        return self


def load_inventory(
    path: str | Path, *, package: str | None = None, root: str | Path | None = None
) -> list[Scenario]:
    """Load an inventory (manifests relative to ``root``); fail closed on any disagreement."""
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
