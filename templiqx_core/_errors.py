"""The port's exception tree. Every error carries a stable ``TQX_*`` code; hosts branch on
``.code``, never on message text:

    PortError               TQX_PORT
    ├── NotFound            TQX_NOT_FOUND        a contract, cassette, prompt or case
    ├── InvalidPath         TQX_PATH_INVALID     a path outside where it may be (an MCP root)
    ├── Unsupported         TQX_UNSUPPORTED      what this adapter or contract cannot do
    ├── IoFailure           TQX_IO               a file that could not be read or written
    ├── InvalidData         TQX_DATA_INVALID     a value, file or configuration
    ├── RuntimeClosed       TQX_RUNTIME_CLOSED   used after or while ``close()`` ran
    ├── OutputSchemaError   TQX_OUTPUT_SCHEMA    an output outside the ``output_schema``
    ├── OutputTypeError     TQX_OUTPUT_TYPE      an output (or a schema) against a typed model
    └── RuntimeFailureError TQX_RUNTIME_* / TQX_HOST_RETRY_EXHAUSTED  (templiqx_core._failures)
"""

from __future__ import annotations

from typing import Any

from . import codes


class PortError(Exception):
    """Pickled from its state (subclasses take other arguments): it crosses processes intact."""

    code: str = codes.PORT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __reduce__(self) -> tuple[Any, ...]:
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type[PortError], args: tuple[Any, ...], state: dict[str, Any]) -> PortError:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class NotFound(PortError):
    code = codes.NOT_FOUND


class InvalidPath(PortError):
    code = codes.PATH_INVALID


class Unsupported(PortError):
    code = codes.UNSUPPORTED


class IoFailure(PortError):
    code = codes.IO


class InvalidData(PortError):
    code = codes.DATA_INVALID


class RuntimeClosed(PortError):
    code = codes.RUNTIME_CLOSED


class OutputSchemaError(PortError):
    code = codes.OUTPUT_SCHEMA


class OutputTypeError(PortError):
    code = codes.OUTPUT_TYPE
