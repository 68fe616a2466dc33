"""The port's exception tree. Every error carries a stable ``TQX_*`` code.

    PortError
    ├── NotFound            TQX_NOT_FOUND
    ├── InvalidPath         TQX_PATH_INVALID
    ├── Unsupported         TQX_UNSUPPORTED
    ├── IoFailure           TQX_IO
    ├── InvalidData         TQX_DATA_INVALID
    ├── RuntimeClosed       TQX_RUNTIME_CLOSED  (used after or while ``close()`` ran)
    ├── OutputSchemaError   TQX_OUTPUT_SCHEMA   (a receipt's output, asked for as a model)
    ├── OutputTypeError     TQX_OUTPUT_TYPE     (the output, or a schema, against a model)
    └── RuntimeFailureError TQX_RUNTIME_* / TQX_HOST_RETRY_EXHAUSTED  (templiqx_core._failures)

Hosts branch on ``.code``, never on message text: messages are for people.
"""

from __future__ import annotations

from typing import Any

from . import codes

__all__ = [
    "InvalidData",
    "InvalidPath",
    "IoFailure",
    "NotFound",
    "OutputSchemaError",
    "OutputTypeError",
    "PortError",
    "RuntimeClosed",
    "Unsupported",
]


class PortError(Exception):
    """Base of every error the core and its adapters raise on purpose; pickled from its state
    (subclasses take other arguments), so it crosses a process boundary intact."""

    code: str = codes.PORT

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message

    def __reduce__(self) -> tuple[Any, ...]:
        return _restore, (type(self), self.args, self.__dict__)


def _restore(cls: type[PortError], args: tuple[Any, ...], state: dict[str, Any]) -> PortError:
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class NotFound(PortError):
    """A contract, cassette, prompt or case that does not exist."""

    code = codes.NOT_FOUND


class InvalidPath(PortError):
    """A path outside where it may be (e.g. an MCP root)."""

    code = codes.PATH_INVALID


class Unsupported(PortError):
    """A request for what this adapter or contract cannot do."""

    code = codes.UNSUPPORTED


class IoFailure(PortError):
    """A file that could not be read or written."""

    code = codes.IO


class InvalidData(PortError):
    """A value, file or configuration that does not hold what it must."""

    code = codes.DATA_INVALID


class RuntimeClosed(PortError):
    """A call to a runtime after its ``close()``/``aclose()``."""

    code = codes.RUNTIME_CLOSED


class OutputSchemaError(PortError):
    """An output that does not satisfy the contract's ``output_schema``."""

    code = codes.OUTPUT_SCHEMA


class OutputTypeError(PortError):
    """An output that does not validate as a typed contract's model, or a model that does not
    match the contract's ``output_schema``."""

    code = codes.OUTPUT_TYPE
