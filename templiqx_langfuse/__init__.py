"""templiqx_langfuse: the Langfuse-traced runtime adapter for OpenAI-compatible endpoints."""

import logging

from ._config import LangfuseConfig, ModelConfig
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

logging.getLogger("templiqx_langfuse").addHandler(logging.NullHandler())
