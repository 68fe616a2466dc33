"""Wire contracts, byte-identical to what the Rust reference's serde writes: unknown fields
refused, no coercion, fields in declaration order, optional ones omitted as the reference
omits them, every map or JSON value with sorted keys (``BTreeMap``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Final, Generic, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from ._canonical import freeze, sort_keys, wire_json

API_VERSION: Final = "templiqx/v1alpha1"

Role = Literal["system", "developer", "user", "assistant"]
Severity = Literal["error", "warning", "info"]


class WireModel(BaseModel):
    """Strict, immutable, serde's layout: fields skipped when ``None`` (``_omit_none``), empty
    (``_omit_empty``) or not given (``_omit_unset``); ``_maps`` are written with sorted keys."""

    # defer_build: the CLI pays only for the models it touches; NaN and infinity are not JSON.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, defer_build=True, allow_inf_nan=False
    )
    _omit_none: ClassVar[frozenset[str]] = frozenset()
    _omit_empty: ClassVar[frozenset[str]] = frozenset()
    _omit_unset: ClassVar[frozenset[str]] = frozenset()
    _maps: ClassVar[frozenset[str]] = frozenset()

    @model_serializer(mode="wrap")
    def _serde_layout(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        for key in list(data) if isinstance(data, dict) else ():
            if (
                (key in self._omit_none and data[key] is None)
                or (key in self._omit_empty and data[key] == [])
                or (key in self._omit_unset and key not in self.model_fields_set)
            ):
                del data[key]
            elif key in self._maps:
                value = getattr(self, key)
                models = value if isinstance(value, list) else [value]  # models lay out their own
                if not any(isinstance(item, BaseModel) for item in models):
                    data[key] = sort_keys(data[key])
        return data

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(mode="json")

    def model_dump_json(self, *, indent: int | None = None, **kwargs: Any) -> str:
        """serde_json's text for this value (``indent=2`` for its pretty form)."""
        if kwargs:
            return super().model_dump_json(indent=indent, **kwargs)
        return wire_json(self.to_json(), indent=indent)


class CompiledMessage(WireModel):
    role: Role
    content: str


class CompiledInteraction(WireModel):
    """Frozen all the way down (on construction and by ``model_copy``): a fingerprint holds."""

    _maps = frozenset({"output_schema", "runtime_policy", "extensions"})

    compiler: str
    contract_id: str
    contract_version: str
    messages: list[CompiledMessage]
    output_schema: JsonValue
    required_capabilities: list[str]
    target_capabilities: list[str]
    runtime_policy: dict[str, JsonValue]
    extensions: dict[str, JsonValue]

    _fingerprint: str | None = PrivateAttr(default=None)  # see _receipts.request_fingerprint

    @model_validator(mode="after")
    def _frozen_on_construction(self) -> CompiledInteraction:
        self._freeze()
        return self

    def _freeze(self) -> None:
        for name, value in self.__dict__.items():  # the fields; strings stay as they are
            frozen = freeze(value)
            if frozen is not value:
                object.__setattr__(self, name, frozen)

    def __eq__(self, other: object) -> bool:  # fields only, not the cached fingerprint
        if not isinstance(other, CompiledInteraction):
            return NotImplemented
        return type(self) is type(other) and self.__dict__ == other.__dict__

    __hash__ = None  # type: ignore[assignment]  # as before: list fields are unhashable

    def model_copy(
        self, *, update: Mapping[str, Any] | None = None, deep: bool = False
    ) -> CompiledInteraction:
        copy = super().model_copy(update=update, deep=deep)
        if update:
            copy._fingerprint = None
            copy._freeze()
        return copy


class AdapterDescriptor(WireModel):
    id: str
    version: str
    capabilities: list[str]


class ExecutionRequest(WireModel):
    """One call: a compiled interaction (and, for the scripted runtime, its ``fixture_output``)."""

    _maps = frozenset({"fixture_output"})

    interaction: CompiledInteraction
    fixture_output: JsonValue = None


class ExecutionReceipt(WireModel):
    """What a call produced: its output, whether it is schema-valid, and both fingerprints."""

    _maps = frozenset({"output"})

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
    """Terminal success: the receipt's fields inline (serde's internal tagging)."""

    _maps = frozenset({"output"})

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
    DeltaEvent | ToolCallDeltaEvent | CompleteEvent | FailedEvent, Field(discriminator="kind")
]


_U32 = Annotated[int, Field(ge=0, le=2**32 - 1)]


class SourceSpan(WireModel):
    line: _U32
    column: _U32
    end_line: _U32
    end_column: _U32


class Diagnostic(WireModel):
    """One problem found: a stable ``code``, a message, and where (file, JSON pointer, span)."""

    _omit_none = frozenset({"file", "json_pointer", "span", "help"})

    code: str
    severity: Severity
    message: str
    file: str | None = None
    json_pointer: str | None = None
    span: SourceSpan | None = None
    help: str | None = None


T = TypeVar("T")


class OperationEnvelope(WireModel, Generic[T]):
    """The result of one operation (any ``api_version`` accepted on input)."""

    _omit_none = frozenset({"result", "attempts"})
    _omit_empty = frozenset({"stream_events"})
    _maps = frozenset({"result", "fingerprints"})

    api_version: str = API_VERSION
    operation: str
    ok: bool
    result: T | None = None
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    fingerprints: dict[str, str] = Field(default_factory=dict)
    stream_events: list[StreamEvent] = Field(default_factory=list)
    attempts: int | None = None  # tries an execution with repair made


class RenderRequest(WireModel):
    """The values a contract compiles with: ``inputs`` and ``context``, checked by their schemas."""

    _maps = frozenset({"inputs", "context"})

    inputs: dict[str, JsonValue] = Field(default_factory=dict)
    context: dict[str, JsonValue] = Field(default_factory=dict)


class FixtureResult(WireModel):
    """One eval fixture's outcome, as the reference's ``TestCaseResult`` (the output's fingerprint
    is ``artifact_fingerprint``)."""

    contract_id: str
    fixture_id: str
    passed: bool
    diagnostics: list[Diagnostic]
    artifact_fingerprint: str | None


class FixtureReport(WireModel):
    """As the reference's ``TestReport``: what ``test_package`` reports."""

    package: str
    passed: int
    failed: int
    cases: list[FixtureResult]
