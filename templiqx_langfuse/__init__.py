"""The Langfuse-traced runtime adapter for OpenAI-compatible endpoints. Names load on first
use (PEP 562): pytest imports this package for the bundled plugin in every host test run,
which must not pay for httpx, pydantic, langfuse or OpenTelemetry unless a test needs them."""

from __future__ import annotations

import importlib as _importlib
import logging
import typing as _typing

if _typing.TYPE_CHECKING:
    from ._config import LangfuseConfig, ModelConfig
    from ._deadline import AsyncDeadlineTransport, DeadlineTransport
    from ._prompts import Published, load_contract, promote_label, publish_contract
    from ._redaction import REDACTED, Redactor
    from ._runtime import ADAPTER_ID, LangfuseTracedRuntime, RetryingRuntime
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
    "collect_traces",
    "load_contract",
    "promote_label",
    "publish_contract",
    "trace_attributes",
]

# By hand: the core's lazy helper is private to it. Type checkers see the imports above.
if not _typing.TYPE_CHECKING:
    _WHERE = {
        name: module
        for module, names in {
            "._config": "LangfuseConfig ModelConfig",
            "._deadline": "AsyncDeadlineTransport DeadlineTransport",
            "._prompts": "Published load_contract promote_label publish_contract",
            "._redaction": "REDACTED Redactor",
            "._runtime": "ADAPTER_ID LangfuseTracedRuntime RetryingRuntime",
            "._tracing": "PROMPT_CAPABILITY PROMPT_EXTENSION TracedReceipt TraceRef "
            "collect_traces trace_attributes",
            "._version": "__version__",
            "._wire": "Usage",
        }.items()
        for name in names.split()
    }

    def __getattr__(name: str) -> object:
        if name not in _WHERE:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        module = _importlib.import_module(_WHERE[name], __name__)
        return globals().setdefault(name, getattr(module, name))  # a plain attribute from now on


logging.getLogger("templiqx_langfuse").addHandler(logging.NullHandler())
