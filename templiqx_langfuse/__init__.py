"""templiqx_langfuse: the Langfuse-traced runtime adapter for OpenAI-compatible endpoints.

Names load on first use (PEP 562): pytest imports this package with the bundled plugin in
every host test run, which must not pay for httpx, pydantic, langfuse or OpenTelemetry
unless a test builds a runtime.
"""

from __future__ import annotations

import logging
import typing as _typing

from templiqx_core._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from ._config import LangfuseConfig, ModelConfig
    from ._deadline import AsyncDeadlineTransport, DeadlineTransport
    from ._prompt_cache import aload_contract, load_contract
    from ._prompts import Published, promote_label, publish_contract
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
    from ._wire import Usage

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
    "Published",
    "Redactor",
    "RetryingRuntime",
    "TraceRef",
    "TracedReceipt",
    "Usage",
    "__version__",
    "aload_contract",
    "collect_traces",
    "load_contract",
    "promote_label",
    "publish_contract",
    "trace_attributes",
]

if not _typing.TYPE_CHECKING:  # type checkers see the imports above: a typo stays an error
    __getattr__, __dir__ = _lazy_names(
        __name__,
        {
            "._config": ("LangfuseConfig", "ModelConfig"),
            "._deadline": ("AsyncDeadlineTransport", "DeadlineTransport"),
            "._prompt_cache": ("aload_contract", "load_contract"),
            "._prompts": ("Published", "promote_label", "publish_contract"),
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
            "._wire": ("Usage",),
        },
    )

logging.getLogger("templiqx_langfuse").addHandler(logging.NullHandler())
