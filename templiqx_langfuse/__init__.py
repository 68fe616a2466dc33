"""templiqx_langfuse: the Langfuse-traced runtime adapter for OpenAI-compatible endpoints."""

import logging

from ._version import __version__
from .config import LangfuseConfig, ModelConfig
from .redaction import REDACTED, Redactor
from .retry import RetryingRuntime
from .runtime import ADAPTER_ID, LangfuseTracedRuntime
from .tracing import trace_attributes

__all__ = [
    "ADAPTER_ID",
    "REDACTED",
    "LangfuseConfig",
    "LangfuseTracedRuntime",
    "ModelConfig",
    "Redactor",
    "RetryingRuntime",
    "__version__",
    "trace_attributes",
]

logging.getLogger("templiqx_langfuse").addHandler(logging.NullHandler())
