"""Runtime failures: the stable codes an adapter reports and how they surface.

A ``RuntimeFailure`` is a value (it fingerprints and serializes); ``RuntimeFailureError``
is the exception that carries it through the port. ``to_diagnostic`` is the one place a
``PortError`` becomes a wire ``Diagnostic``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from . import codes
from ._canonical import fingerprint
from ._contracts import AdapterDescriptor, Diagnostic
from ._errors import PortError

__all__ = [
    "MAX_ANSWER_CHARS",
    "RuntimeFailure",
    "RuntimeFailureCode",
    "RuntimeFailureError",
    "display",
    "to_diagnostic",
]


class RuntimeFailureCode(StrEnum):
    TIMEOUT = codes.RUNTIME_TIMEOUT
    RATE_LIMITED = codes.RUNTIME_RATE_LIMITED
    UNAVAILABLE = codes.RUNTIME_UNAVAILABLE
    INVALID_RESPONSE = codes.RUNTIME_INVALID_RESPONSE
    PERMANENT = codes.RUNTIME_PERMANENT
    RETRY_EXHAUSTED = codes.HOST_RETRY_EXHAUSTED

    @property
    def retryable(self) -> bool:
        """Whether trying the same request again may succeed."""
        return self in _RETRYABLE


_RETRYABLE = frozenset(
    {RuntimeFailureCode.TIMEOUT, RuntimeFailureCode.RATE_LIMITED, RuntimeFailureCode.UNAVAILABLE}
)


#: How much of an answer that is not JSON a failure keeps (for a repair to echo back).
MAX_ANSWER_CHARS = 65_536


@dataclass(frozen=True)
class RuntimeFailure:
    """What went wrong in one runtime call. ``detail`` is already free of secrets.

    ``answer`` is set only when the model answered with text that is not JSON (as opposed
    to a malformed response): that text, redacted and bounded, so a repair can send it back.
    It is in neither the fingerprint nor the JSON: artefacts name the failure, not the text.
    """

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
        """``fingerprint``: computed from the adapter, code and detail unless given."""
        return cls(
            code=code,
            adapter_id=adapter.id,
            adapter_version=adapter.version,
            detail=detail,
            scenario_id=scenario_id,
            retry_after_ms=retry_after_ms,
            fingerprint=fingerprint,
            answer=answer,
        )

    @property
    def retryable(self) -> bool:
        return self.code.retryable

    def to_json(self) -> dict[str, Any]:
        return {
            "code": self.code.value,
            "adapter_id": self.adapter_id,
            "adapter_version": self.adapter_version,
            "scenario_id": self.scenario_id,
            "retry_after_ms": self.retry_after_ms,
            "fingerprint": self.fingerprint,
            "detail": self.detail,
        }

    def help_line(self) -> str:
        """The ``help`` text of the diagnostic this failure becomes, as the reference's."""
        return (
            f"adapter={self.adapter_id} version={self.adapter_version} "
            f"scenario={self.scenario_id or 'none'} "
            f"retry_after_ms={'none' if self.retry_after_ms is None else self.retry_after_ms} "
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
        return self.failure.retryable


# How the reference's ``PortError`` displays each kind (its thiserror messages).
_DISPLAY_PREFIX = {
    codes.NOT_FOUND: "not found: ",
    codes.CAS_CONFLICT: "conflict: ",
    codes.PATH_INVALID: "invalid path: ",
    codes.UNSUPPORTED: "unsupported: ",
    codes.IO: "I/O error: ",
    codes.DATA_INVALID: "invalid data: ",
}


def display(error: PortError) -> str:
    """The error's text as the reference displays the same ``PortError``."""
    if isinstance(error, RuntimeFailureError):
        return str(error)
    return _DISPLAY_PREFIX.get(error.code, "") + str(error)


def to_diagnostic(error: PortError) -> Diagnostic:
    """Project any ``PortError`` onto one error ``Diagnostic``, as the reference application.

    ``json_pointer`` is ``""`` (the whole request); a runtime failure adds the ``help``
    line ``adapter=… version=… scenario=… retry_after_ms=… fingerprint=…``.
    """
    help_text = error.failure.help_line() if isinstance(error, RuntimeFailureError) else None
    return Diagnostic(
        code=error.code, severity="error", message=display(error), json_pointer="", help=help_text
    )
