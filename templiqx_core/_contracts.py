"""Wire contracts, JSON-identical to the Rust reference (SPEC §2).

Every model rejects unknown fields. Fields the reference omits when empty are listed in
``_omit_when_empty`` and dropped by one shared serializer, so ``model_dump_json()`` gives
the reference's exact field set.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    SerializationInfo,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)

__all__ = [
    "API_VERSION",
    "AdapterDescriptor",
    "CompiledInteraction",
    "CompiledMessage",
    "CompleteEvent",
    "DeltaEvent",
    "Diagnostic",
    "ExecutionReceipt",
    "ExecutionRequest",
    "FailedEvent",
    "OperationEnvelope",
    "RenderRequest",
    "Role",
    "Severity",
    "SourceSpan",
    "StreamEvent",
    "ToolCallDeltaEvent",
    "parse_stream_event",
]

API_VERSION: Final = "templiqx/v1alpha1"

Role = Literal["system", "developer", "user", "assistant"]
Severity = Literal["error", "warning", "info"]


class WireModel(BaseModel):
    """Strict, immutable base: unknown fields are errors, empties omitted where listed."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    _omit_when_empty: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _omit_empty(self, handler: SerializerFunctionWrapHandler, info: SerializationInfo) -> Any:
        data = handler(self)
        if self._omit_when_empty and isinstance(data, dict):
            for key in self._omit_when_empty:
                if key in data and (data[key] is None or data[key] == []):
                    del data[key]
        return data

    def to_json(self) -> dict[str, Any]:
        """The JSON object the reference writes for this value."""
        return self.model_dump(mode="json")


class CompiledMessage(WireModel):
    role: Role
    content: str


class CompiledInteraction(WireModel):
    compiler: str
    contract_id: str
    contract_version: str
    messages: list[CompiledMessage]
    output_schema: JsonValue
    required_capabilities: list[str]
    target_capabilities: list[str]
    runtime_policy: dict[str, JsonValue]
    extensions: dict[str, JsonValue]


class AdapterDescriptor(WireModel):
    id: str
    version: str
    capabilities: list[str]


class ExecutionRequest(WireModel):
    interaction: CompiledInteraction
    fixture_output: JsonValue = None


class ExecutionReceipt(WireModel):
    adapter: AdapterDescriptor
    request_fingerprint: str
    output_fingerprint: str
    output: JsonValue
    output_schema_valid: bool


class DeltaEvent(WireModel):
    kind: Literal["Delta"] = "Delta"
    text: str


class ToolCallDeltaEvent(WireModel):
    kind: Literal["ToolCallDelta"] = "ToolCallDelta"
    name: str
    arguments_fragment: str


class CompleteEvent(WireModel):
    """Terminal success: the receipt's fields inline, as serde's internal tagging lays them."""

    kind: Literal["Complete"] = "Complete"
    adapter: AdapterDescriptor
    request_fingerprint: str
    output_fingerprint: str
    output: JsonValue
    output_schema_valid: bool

    @classmethod
    def from_receipt(cls, receipt: ExecutionReceipt) -> CompleteEvent:
        return cls.model_construct(kind="Complete", **dict(receipt))

    @property
    def receipt(self) -> ExecutionReceipt:
        fields = {name: getattr(self, name) for name in ExecutionReceipt.model_fields}
        return ExecutionReceipt.model_construct(**fields)


class FailedEvent(WireModel):
    kind: Literal["Failed"] = "Failed"
    code: str
    message: str


StreamEvent = Annotated[
    DeltaEvent | ToolCallDeltaEvent | CompleteEvent | FailedEvent,
    Field(discriminator="kind"),
]
_STREAM_EVENT: TypeAdapter[StreamEvent] = TypeAdapter(StreamEvent)


def parse_stream_event(data: Any) -> StreamEvent:
    """Validate a JSON object (or JSON text) into the matching ``StreamEvent`` variant."""
    if isinstance(data, (str, bytes)):
        return _STREAM_EVENT.validate_json(data)
    return _STREAM_EVENT.validate_python(data)


class SourceSpan(WireModel):
    """1-based line and column of a diagnostic in its source file."""

    line: int
    column: int


class Diagnostic(WireModel):
    _omit_when_empty = frozenset({"file", "json_pointer", "span", "help"})

    code: str
    severity: Severity
    message: str
    file: str | None = None
    json_pointer: str | None = None
    span: SourceSpan | None = None
    help: str | None = None


T = TypeVar("T")


class OperationEnvelope(WireModel, Generic[T]):
    _omit_when_empty = frozenset({"result", "stream_events"})

    api_version: Literal["templiqx/v1alpha1"] = API_VERSION
    operation: str
    ok: bool
    result: T | None = None
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    fingerprints: dict[str, str] = Field(default_factory=dict)
    stream_events: list[StreamEvent] = Field(default_factory=list)


class RenderRequest(WireModel):
    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    context: dict[str, JsonValue] = Field(default_factory=dict)
