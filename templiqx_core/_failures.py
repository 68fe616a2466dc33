"""A ``RuntimeFailure`` is a value with a fingerprint, ``RuntimeFailureError`` carries it through
the port, and ``to_diagnostic`` is the one place a ``PortError`` becomes a ``Diagnostic``."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from . import codes
from ._canonical import fingerprint
from ._contracts import AdapterDescriptor, Diagnostic
from ._errors import PortError


class RuntimeFailureCode(StrEnum):
    """The codes a call can fail with (``FailedEvent.code``, ``RuntimeFailureError.code``)."""

    TIMEOUT = codes.RUNTIME_TIMEOUT
    RATE_LIMITED = codes.RUNTIME_RATE_LIMITED
    UNAVAILABLE = codes.RUNTIME_UNAVAILABLE
    INVALID_RESPONSE = codes.RUNTIME_INVALID_RESPONSE
    PERMANENT = codes.RUNTIME_PERMANENT
    RETRY_EXHAUSTED = codes.HOST_RETRY_EXHAUSTED

    @property
    def retryable(self) -> bool:
        return self in (
            codes.RUNTIME_TIMEOUT,
            codes.RUNTIME_RATE_LIMITED,
            codes.RUNTIME_UNAVAILABLE,
        )


#: How much of an answer that is not JSON a failure keeps (for a repair to echo back).
MAX_ANSWER_CHARS = 65_536


@dataclass(frozen=True)
class RuntimeFailure:
    """``detail`` is free of secrets; ``answer`` (a reply that is not JSON, redacted, bounded) is
    for a repair to send back, in neither the fingerprint nor the JSON."""

    code: RuntimeFailureCode
    adapter_id: str
    adapter_version: str
    detail: str
    scenario_id: str | None = None
    retry_after_ms: int | None = None
    fingerprint: str = ""
    answer: str | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.answer is not None and len(self.answer) > MAX_ANSWER_CHARS:
            object.__setattr__(self, "answer", self.answer[:MAX_ANSWER_CHARS])
        if not self.fingerprint:
            value = {"adapter": self.adapter_id, "code": self.code.value, "detail": self.detail}
            object.__setattr__(self, "fingerprint", fingerprint(value))

    @classmethod
    def for_adapter(
        cls,
        adapter: AdapterDescriptor,
        code: RuntimeFailureCode,
        detail: str,
        *,
        retry_after_ms: int | None = None,
        scenario_id: str | None = None,
        fingerprint: str = "",
        answer: str | None = None,
    ) -> RuntimeFailure:
        ids = (adapter.id, adapter.version)
        return cls(code, *ids, detail, scenario_id, retry_after_ms, fingerprint, answer)

    def help_line(self) -> str:
        retry = "none" if self.retry_after_ms is None else self.retry_after_ms
        return (
            f"adapter={self.adapter_id} version={self.adapter_version} "
            f"scenario={self.scenario_id or 'none'} retry_after_ms={retry} "
            f"fingerprint={self.fingerprint}"
        )


class RuntimeFailureError(PortError):
    """A runtime call failed; ``.failure`` says how, ``.code`` is its stable code."""

    def __init__(self, failure: RuntimeFailure) -> None:
        super().__init__(f"runtime failure {failure.code.value}: {failure.detail}")
        self.failure = failure
        self.code = failure.code.value

    @property
    def retryable(self) -> bool:
        return self.failure.code.retryable


# How the reference's ``PortError`` displays each kind (its thiserror messages).
_DISPLAY_PREFIX = {
    codes.NOT_FOUND: "not found: ",
    codes.CAS_CONFLICT: "conflict: ",
    codes.PATH_INVALID: "invalid path: ",
    codes.UNSUPPORTED: "unsupported: ",
    codes.IO: "I/O error: ",
    codes.DATA_INVALID: "invalid data: ",
}


def to_diagnostic(error: PortError) -> Diagnostic:
    """Any ``PortError`` as the reference application's one error ``Diagnostic`` (pointer
    ``""``, the whole request); a runtime failure's has the reference's ``help`` line."""
    message, help_text = _DISPLAY_PREFIX.get(error.code, "") + str(error), None
    if isinstance(error, RuntimeFailureError):
        message, help_text = str(error), error.failure.help_line()
    return Diagnostic(
        code=error.code, severity="error", message=message, json_pointer="", help=help_text
    )
