"""A runtime leaves nothing behind in other libraries, and fails loudly where it must."""

from __future__ import annotations

import gc
import logging
from typing import Any

import pytest

from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from templiqx_langfuse._redaction import HTTP_LOGGERS, live_redactors
from tests.conftest import MODEL_KEY


def build() -> LangfuseTracedRuntime:
    model = ModelConfig(base_url="http://127.0.0.1:9/v1", api_key=MODEL_KEY, model="m")
    return LangfuseTracedRuntime(model, LangfuseConfig())


def logged(caplog: pytest.LogCaptureFixture, text: str) -> str:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="httpx"):
        logging.getLogger("httpx").debug("header %s", text)
    return caplog.records[-1].getMessage()


def per_runtime_filters() -> list[Any]:
    return [f for name in HTTP_LOGGERS for f in logging.getLogger(name).filters[1:]]


def test_a_runtime_collected_without_close_leaves_no_log_filter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = build()
    member = runtime._wiring.redactor
    assert member in live_redactors()
    assert MODEL_KEY not in logged(caplog, MODEL_KEY)  # redacted while the runtime lives
    assert per_runtime_filters() == []  # only the one shared filter sits on the loggers
    del runtime, member
    gc.collect()
    assert live_redactors() == []
    assert per_runtime_filters() == []


def test_close_removes_the_runtimes_redactor(caplog: pytest.LogCaptureFixture) -> None:
    runtime = build()
    runtime.close()
    assert runtime._wiring.redactor not in live_redactors()


def malformed(*args: object) -> logging.LogRecord:
    """A record logging cannot format (more placeholders than arguments)."""
    return logging.LogRecord("httpx", logging.INFO, __file__, 1, "%s %s %s", args, None)


def test_a_malformed_record_never_raises_at_the_caller_once_the_runtimes_are_gone() -> None:
    """logging reports a record it cannot format (``handleError``); the shared filter, left
    on the HTTP loggers for good, must not turn that into an exception in the caller."""
    runtime = build()
    runtime.close()
    del runtime
    gc.collect()
    assert live_redactors() == []
    assert logging.getLogger("httpx").filter(malformed("one"))


def test_a_malformed_record_is_redacted_not_raised_while_a_runtime_lives() -> None:
    runtime = build()
    record = malformed(MODEL_KEY)
    assert logging.getLogger("httpx").filter(record)
    assert MODEL_KEY not in record.getMessage()
    runtime.close()
