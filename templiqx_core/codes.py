"""Every stable ``TQX_*`` code, the Rust reference's string where it has one: hosts branch on
these, never on message text."""

from __future__ import annotations

from typing import Final

PORT: Final = "TQX_PORT"
NOT_FOUND: Final = "TQX_NOT_FOUND"
CAS_CONFLICT: Final = "TQX_CAS_CONFLICT"
PATH_INVALID: Final = "TQX_PATH_INVALID"
UNSUPPORTED: Final = "TQX_UNSUPPORTED"
IO: Final = "TQX_IO"
DATA_INVALID: Final = "TQX_DATA_INVALID"

# Runtime failures (RuntimeFailureCode); retryable: timeout, rate-limited, unavailable.
RUNTIME_TIMEOUT: Final = "TQX_RUNTIME_TIMEOUT"
RUNTIME_RATE_LIMITED: Final = "TQX_RUNTIME_RATE_LIMITED"
RUNTIME_UNAVAILABLE: Final = "TQX_RUNTIME_UNAVAILABLE"
RUNTIME_INVALID_RESPONSE: Final = "TQX_RUNTIME_INVALID_RESPONSE"
RUNTIME_PERMANENT: Final = "TQX_RUNTIME_PERMANENT"
HOST_RETRY_EXHAUSTED: Final = "TQX_HOST_RETRY_EXHAUSTED"

# Python's own: used after ``close()``; a ``BaseException`` or a host's sink ended the call.
RUNTIME_CLOSED: Final = "TQX_RUNTIME_CLOSED"
RUNTIME_INTERRUPTED: Final = "TQX_RUNTIME_INTERRUPTED"

OUTPUT_SCHEMA: Final = "TQX_OUTPUT_SCHEMA"
OUTPUT_SCHEMA_STRICT: Final = "TQX_OUTPUT_SCHEMA_STRICT"  # strict structured outputs refuse it
OUTPUT_TYPE: Final = "TQX_OUTPUT_TYPE"  # an output against a typed contract's model
RUNTIME_CAPABILITY_UNSUPPORTED: Final = "TQX_RUNTIME_CAPABILITY_UNSUPPORTED"
TEST_FAILED: Final = "TQX_TEST_FAILED"

PARSE_YAML: Final = "TQX_PARSE_YAML"
CAPABILITY_UNSUPPORTED: Final = "TQX_CAPABILITY_UNSUPPORTED"
EXTENSION_NAMESPACE: Final = "TQX_EXTENSION_NAMESPACE"
EXTENSION_UNSUPPORTED: Final = "TQX_EXTENSION_UNSUPPORTED"
EXTENSION_SCHEMA: Final = "TQX_EXTENSION_SCHEMA"
VALUE_REQUIRED: Final = "TQX_VALUE_REQUIRED"
VALUE_SCHEMA: Final = "TQX_VALUE_SCHEMA"
VALUE_UNKNOWN: Final = "TQX_VALUE_UNKNOWN"
REF_UNKNOWN: Final = "TQX_REF_UNKNOWN"
CONDITION_TYPE: Final = "TQX_CONDITION_TYPE"
FILTER_TYPE: Final = "TQX_FILTER_TYPE"
INTERPOLATION_TYPE: Final = "TQX_INTERPOLATION_TYPE"
FOR_EACH_TYPE: Final = "TQX_FOR_EACH_TYPE"
COMPONENT_MISSING: Final = "TQX_COMPONENT_MISSING"
COMPONENT_ARGUMENT_UNKNOWN: Final = "TQX_COMPONENT_ARGUMENT_UNKNOWN"
COMPONENT_ARGUMENT_MISSING: Final = "TQX_COMPONENT_ARGUMENT_MISSING"
COMPONENT_ARGUMENT_TYPE: Final = "TQX_COMPONENT_ARGUMENT_TYPE"
TEMPLATE_SYNTAX: Final = "TQX_TEMPLATE_SYNTAX"  # a malformed ``{{ ... }}`` in a string form

# Every code above (a test checks that no ``TQX_*`` literal lives anywhere else).
ALL_CODES: Final = frozenset(value for name, value in dict(globals()).items() if name.isupper())
__all__ = sorted(name for name in dict(globals()) if name.isupper())
