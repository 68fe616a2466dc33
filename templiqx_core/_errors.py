"""The port's exception tree. Every error carries a stable ``TQX_*`` code.

    PortError
    ├── NotFound            TQX_NOT_FOUND
    ├── Conflict            TQX_CAS_CONFLICT
    ├── InvalidPath         TQX_PATH_INVALID
    ├── Unsupported         TQX_UNSUPPORTED
    ├── IoFailure           TQX_IO
    ├── InvalidData         TQX_DATA_INVALID
    └── RuntimeFailureError TQX_RUNTIME_* / TQX_HOST_RETRY_EXHAUSTED  (templiqx_core._failures)

Hosts branch on ``.code``, never on message text: messages are for people.
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "InvalidData",
    "InvalidPath",
    "IoFailure",
    "NotFound",
    "PortError",
    "Unsupported",
]


class PortError(Exception):
    """Base of every error the core and its adapters raise on purpose."""

    code: str = "TQX_PORT"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class NotFound(PortError):
    code = "TQX_NOT_FOUND"


class Conflict(PortError):
    code = "TQX_CAS_CONFLICT"


class InvalidPath(PortError):
    code = "TQX_PATH_INVALID"


class Unsupported(PortError):
    code = "TQX_UNSUPPORTED"


class IoFailure(PortError):
    code = "TQX_IO"


class InvalidData(PortError):
    code = "TQX_DATA_INVALID"
