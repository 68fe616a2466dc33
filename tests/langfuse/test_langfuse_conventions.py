"""Langfuse's own configuration conventions: the SDK's ``LANGFUSE_*`` variables with the
SDK's meaning, and its ``mask`` hook for keeping personal data out of Langfuse."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from langfuse._client import environment_variables as sdk_env  # the SDK's list, as documented
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import templiqx_langfuse
from templiqx_core import ExecutionRequest, InvalidData
from templiqx_langfuse import LangfuseConfig
from templiqx_langfuse import _config as config_module
from tests.conftest import PUBLIC_KEY, SECRET_KEY, RuntimeFactory
from tests.otlp_receiver import attributes_of, otlp_receiver

KEYS = {"LANGFUSE_PUBLIC_KEY": PUBLIC_KEY, "LANGFUSE_SECRET_KEY": SECRET_KEY}


def test_the_sdks_variables_are_read_with_the_sdks_meaning() -> None:
    config = LangfuseConfig.from_env(
        {
            **KEYS,
            "LANGFUSE_SAMPLE_RATE": "0.25",
            "LANGFUSE_TRACING_ENVIRONMENT": "staging",
            "LANGFUSE_RELEASE": "1.4.2",
            "LANGFUSE_FLUSH_AT": "128",
            "LANGFUSE_FLUSH_INTERVAL": "2.5",
            "LANGFUSE_TIMEOUT": "7",
        }
    )
    assert (config.sample_rate, config.environment, config.release) == (0.25, "staging", "1.4.2")
    assert (config.flush_at, config.flush_interval_s, config.timeout_s) == (128, 2.5, 7.0)
    assert config.enabled


@pytest.mark.parametrize("value", ["false", "False", "FALSE", " false "])
def test_tracing_enabled_false_switches_tracing_off_whatever_the_keys(value: str) -> None:
    config = LangfuseConfig.from_env({**KEYS, "LANGFUSE_TRACING_ENABLED": value})
    assert not config.enabled
    assert config.keys()[0] == PUBLIC_KEY  # still known: still redacted


@pytest.mark.parametrize("value", ["true", "1", "yes", ""])
def test_any_other_tracing_enabled_value_leaves_tracing_on(value: str) -> None:
    assert LangfuseConfig.from_env({**KEYS, "LANGFUSE_TRACING_ENABLED": value}).enabled


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("LANGFUSE_SAMPLE_RATE", "1.5"),
        ("LANGFUSE_SAMPLE_RATE", "half"),
        ("LANGFUSE_FLUSH_AT", "0"),
        ("LANGFUSE_FLUSH_AT", "1e3"),
        ("LANGFUSE_FLUSH_INTERVAL", "nan"),
        ("LANGFUSE_TIMEOUT", "-1"),
        ("LANGFUSE_TRACING_ENVIRONMENT", "Prod"),
    ],
)
def test_a_bad_value_is_invalid_data_naming_the_setting_not_the_value(
    variable: str, value: str
) -> None:
    with pytest.raises(InvalidData) as raised:
        LangfuseConfig.from_env({**KEYS, variable: value})
    assert raised.value.code == "TQX_DATA_INVALID"
    assert value.strip() not in str(raised.value) or value.strip() in {"0", "-1"}


def test_arguments_win_over_the_environment() -> None:
    config = LangfuseConfig.from_env({**KEYS, "LANGFUSE_RELEASE": "env"}, release="argument")
    assert config.release == "argument"


def test_every_sdk_variable_that_applies_here_is_read() -> None:
    """The SDK's list is the reference: each variable it defines is read here, or is one
    that does not apply to this adapter's export (named, so a new one is a decision)."""
    sdk = {v for k, v in vars(sdk_env).items() if k.startswith("LANGFUSE_") and isinstance(v, str)}
    ours = {variable for names in config_module.LANGFUSE_ENV.values() for variable in names}
    not_applicable = {
        "LANGFUSE_DEBUG",  # configures the SDK's own logger
        "LANGFUSE_MEDIA_UPLOAD_THREAD_COUNT",  # the SDK's media upload
        "LANGFUSE_MEDIA_UPLOAD_ENABLED",
        "LANGFUSE_OBSERVE_DECORATOR_IO_CAPTURE_ENABLED",  # the SDK's @observe
        "LANGFUSE_PROMPT_CACHE_DEFAULT_TTL_SECONDS",  # the SDK's prompt client
        "LANGFUSE_OPENAI_SKIP_RAW_RESPONSES",  # the SDK's OpenAI wrapper
        "LANGFUSE_OTEL_TRACES_EXPORT_PATH",  # the SDK's exporter (this path is fixed)
        "LANGFUSE_OTEL_MAX_BATCH_SIZE_BYTES",  # batches are split on the server's 413
        "LANGFUSE_OTEL_COMPRESSION",  # always gzip
    }
    assert sdk - ours - not_applicable == set()


def _masking(data: Any) -> Any:
    text = json.dumps(data)
    return json.loads(text.replace("Ryan", "<name>"))


def test_the_mask_applies_to_input_output_and_metadata_before_export(
    make_runtime: RuntimeFactory, exporter: InMemorySpanExporter, greeting_request: ExecutionRequest
) -> None:
    seen: list[str] = []

    def mask(*, data: Any) -> Any:
        seen.append(type(data).__name__)
        return _masking(data)

    runtime = make_runtime(mask=mask)
    receipt = runtime.execute(greeting_request)
    runtime.close()
    assert receipt.output == {"greeting": "Hello Ryan"}  # the caller's receipt is untouched
    (span,) = exporter.get_finished_spans()
    attributes = span.attributes or {}
    for key in (A.OBSERVATION_INPUT, A.OBSERVATION_OUTPUT):
        assert "Ryan" not in str(attributes[key])
        assert "<name>" in str(attributes[key])
    assert sorted(seen) == ["dict", "dict", "list"]


def test_a_mask_that_raises_drops_the_field_never_the_call(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    def mask(*, data: Any) -> Any:
        if isinstance(data, list):
            return data  # the input passes
        raise ValueError("cannot mask this")

    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None, mask=mask)
        receipt = runtime.execute(greeting_request)
        runtime.close()
        (span,) = receiver.spans
    assert receipt.output == {"greeting": "Hello Ryan"}
    attributes = attributes_of(span)
    assert A.OBSERVATION_OUTPUT not in attributes
    assert A.OBSERVATION_METADATA not in attributes
    assert A.OBSERVATION_INPUT in attributes


def _circular(data: Any) -> Any:
    if isinstance(data, dict):
        looped = dict(data)
        looped["self"] = looped
        return looped
    return data


@pytest.mark.parametrize(
    "masking",
    [_circular, lambda data: {"value": object(), "set": {1, 2}}],
    ids=["circular", "odd-types"],
)
def test_a_mask_returning_what_json_cannot_hold_costs_that_field_alone(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest, masking: Any
) -> None:
    """Before: a circular value failed the generation's end, and every generation was lost."""
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(
            langfuse_base_url=receiver.base_url,
            span_exporter=None,
            mask=lambda *, data: masking(data),
        )
        for _ in range(3):
            runtime.execute(greeting_request)
        runtime.close()
        spans = [attributes_of(span) for span in receiver.spans]
    assert len(spans) == 3
    for attributes in spans:
        metadata = json.loads(attributes[A.OBSERVATION_METADATA])  # still JSON, either way
        assert isinstance(metadata, dict)
        assert A.OBSERVATION_INPUT in attributes


def test_a_mask_that_is_not_callable_is_refused() -> None:
    with pytest.raises(InvalidData, match="mask"):
        LangfuseConfig(mask="redact-emails")  # type: ignore[arg-type]


def test_the_export_says_who_sends_it(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    """This package by name and version (the server attributes ingestion by them), with
    the ingestion version the server's OTel endpoint requires; not the langfuse SDK."""
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        runtime.execute(greeting_request)
        runtime.close()
        (request, *_) = receiver.requests
    assert request.headers["x-langfuse-sdk-name"] == "templiqx-langfuse"
    assert request.headers["x-langfuse-sdk-version"] == templiqx_langfuse.__version__
    assert request.headers["x-langfuse-ingestion-version"] == "4"
