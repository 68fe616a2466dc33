"""templiqx_langfuse: the Langfuse-traced runtime adapter for OpenAI-compatible endpoints.

Names load on first use (PEP 562), the one lazy loader of both packages: pytest imports
this package with the bundled plugin in every host test run, which must not pay for
httpx, pydantic, the core, langfuse or OpenTelemetry unless a test builds a runtime.
"""

from __future__ import annotations

import importlib
import logging
from typing import TYPE_CHECKING as _TYPE_CHECKING
from typing import Any as _Any

if _TYPE_CHECKING:
    from ._config import LangfuseConfig, ModelConfig
    from ._deadline import AsyncDeadlineTransport, DeadlineTransport
    from ._redaction import REDACTED, Redactor
    from ._retry import RetryingRuntime
    from ._runtime import ADAPTER_ID, LangfuseTracedRuntime
    from ._tracing import (
        PROMPT_CAPABILITY,
        PROMPT_EXTENSION,
        TracedReceipt,
        TraceRef,
        collect_traces,
        trace_attributes,
    )
    from ._version import __version__

__all__ = [
    "ADAPTER_ID",
    "PROMPT_CAPABILITY",
    "PROMPT_EXTENSION",
    "REDACTED",
    "AsyncDeadlineTransport",
    "DeadlineTransport",
    "LangfuseConfig",
    "LangfuseTracedRuntime",
    "ModelConfig",
    "Redactor",
    "RetryingRuntime",
    "TraceRef",
    "TracedReceipt",
    "__version__",
    "collect_traces",
    "trace_attributes",
]

_LAZY = {
    name: module
    for module, names in {
        "._config": ("LangfuseConfig", "ModelConfig"),
        "._deadline": ("AsyncDeadlineTransport", "DeadlineTransport"),
        "._redaction": ("REDACTED", "Redactor"),
        "._retry": ("RetryingRuntime",),
        "._runtime": ("ADAPTER_ID", "LangfuseTracedRuntime"),
        "._tracing": (
            "PROMPT_CAPABILITY",
            "PROMPT_EXTENSION",
            "TracedReceipt",
            "TraceRef",
            "collect_traces",
            "trace_attributes",
        ),
        "._version": ("__version__",),
    }.items()
    for name in names
}


def __getattr__(name: str) -> _Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


logging.getLogger("templiqx_langfuse").addHandler(logging.NullHandler())
