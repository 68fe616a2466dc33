"""``ModelConfig.strict`` against the loopback model server: what each mode sends, the
one warning of ``"auto"`` without a strict form, the refusal of ``True`` before any
request, and the effective value in every generation's metadata."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from langfuse import LangfuseOtelSpanAttributes as A
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import CompiledInteraction, ExecutionRequest, OutputSchemaStrictError, codes
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from templiqx_langfuse._wire import _warn_not_strict
from tests.conftest import BOTH_IO, MODEL_KEY, PUBLIC_KEY, SECRET_KEY, async_driven
from tests.loopback import LoopbackModelServer, chat_completion, json_reply

pytestmark = BOTH_IO

NAMED = {
    "type": "object",
    "properties": {"greeting": {"type": "string", "minLength": 3}},
    "required": ["greeting"],
    "additionalProperties": False,
}
OPEN = {"type": "object"}  # the smallest contract's schema: no strict form

Build = Callable[..., LangfuseTracedRuntime]


@pytest.fixture
def build(
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    io: str,
    request: pytest.FixtureRequest,
) -> Iterator[Build]:
    made: list[LangfuseTracedRuntime] = []
    kind: type[LangfuseTracedRuntime] = LangfuseTracedRuntime
    if io == "async":
        kind = async_driven(kind, request.getfixturevalue("event_loop_runner"))

    def make(strict: Any) -> LangfuseTracedRuntime:
        model = ModelConfig(
            base_url=model_server.base_url, api_key=MODEL_KEY, model="m", strict=strict
        )
        langfuse = LangfuseConfig(
            public_key=f"{PUBLIC_KEY}-strict-{len(made)}-{io}",
            secret_key=SECRET_KEY,
            base_url="http://127.0.0.1:9",
            flush_timeout_s=2.0,
        )
        made.append(kind(model, langfuse, span_exporter=exporter))
        return made[-1]

    yield make
    for runtime in made:
        runtime.close()


def asking(greeting: CompiledInteraction, schema: dict[str, Any]) -> ExecutionRequest:
    return ExecutionRequest(interaction=greeting.model_copy(update={"output_schema": schema}))


def sent_format(server: LoopbackModelServer, index: int = -1) -> dict[str, Any]:
    return dict(server.requests[index].json()["response_format"]["json_schema"])


def strict_metadata(exporter: InMemorySpanExporter, runtime: LangfuseTracedRuntime) -> list[Any]:
    runtime.tracing.close()  # flush the adapter-owned processor
    return [
        json.loads(str((span.attributes or {})[A.OBSERVATION_METADATA]))["json_schema_strict"]
        for span in exporter.get_finished_spans()
    ]


def test_auto_sends_the_strict_form_and_still_enforces_what_it_left_out(
    build: Build,
    greeting: CompiledInteraction,
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
) -> None:
    runtime = build("auto")
    assert runtime.execute(asking(greeting, NAMED)).output_schema_valid is True
    sent = sent_format(model_server)
    assert sent["strict"] is True
    assert sent["schema"]["properties"]["greeting"] == {"type": "string"}  # no minLength
    model_server.set_responder(lambda r: json_reply(chat_completion({"greeting": "Hi"})))
    assert runtime.execute(asking(greeting, NAMED)).output_schema_valid is False  # locally
    assert strict_metadata(exporter, runtime) == [True, True]


def test_the_strict_form_requires_optional_properties_in_the_contracts_order(
    build: Build, greeting: CompiledInteraction, model_server: LoopbackModelServer
) -> None:
    """``required`` is a list: its order is the contract's property order, as the schema
    was written (request bytes, and recorded cassettes, depend on it)."""
    schema = {
        "type": "object",
        "properties": {"zeta": {"type": "string"}, "alpha": {"type": "string"}},
        "additionalProperties": False,
    }
    build("auto").execute(asking(greeting, schema))
    assert sent_format(model_server)["schema"]["required"] == ["zeta", "alpha"]


def test_auto_sends_a_schema_without_strict_form_non_strict_warning_once_per_version(
    build: Build,
    greeting: CompiledInteraction,
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    caplog: pytest.LogCaptureFixture,
) -> None:
    _warn_not_strict.cache_clear()  # once per process: earlier tests may have warned
    runtime = build("auto")
    other_version = greeting.model_copy(update={"output_schema": OPEN, "contract_version": "9"})
    with caplog.at_level(logging.WARNING, logger="templiqx_langfuse"):
        for request in (asking(greeting, OPEN),) * 3 + (
            ExecutionRequest(interaction=other_version),
        ):
            runtime.execute(request)
    assert [sent_format(model_server, i) for i in range(4)] == [
        {"name": "templiqx_output", "strict": False, "schema": OPEN}
    ] * 4
    warnings = [r.getMessage() for r in caplog.records if "strict: false" in r.getMessage()]
    assert len(warnings) == 2  # one per contract id and version
    assert "greeting@" in warnings[0]
    assert "additionalProperties: false" in warnings[0]
    assert strict_metadata(exporter, runtime) == [False] * 4
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="templiqx_langfuse"):
        build("auto").execute(asking(greeting, OPEN))  # nor does another runtime
    assert not [r for r in caplog.records if "strict: false" in r.getMessage()]


def test_strict_true_refuses_a_schema_without_strict_form_before_any_request(
    build: Build, greeting: CompiledInteraction, model_server: LoopbackModelServer
) -> None:
    schema = {
        "type": "object",
        "properties": {"a": OPEN, "b": {"type": "array"}},
        "required": ["a", "b"],
        "additionalProperties": False,
    }
    with pytest.raises(OutputSchemaStrictError) as raised:
        build(True).execute(asking(greeting, schema))
    assert raised.value.code == codes.OUTPUT_SCHEMA_STRICT
    assert "/properties/a" in str(raised.value)
    assert "/properties/b" in str(raised.value)
    assert model_server.requests == []


def test_strict_true_sends_a_fixable_schema_in_its_strict_form(
    build: Build, greeting: CompiledInteraction, model_server: LoopbackModelServer
) -> None:
    build(True).execute(asking(greeting, NAMED))
    assert sent_format(model_server)["strict"] is True
    assert "minLength" not in json.dumps(sent_format(model_server))


def test_strict_false_sends_the_schema_as_written(
    build: Build,
    greeting: CompiledInteraction,
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
) -> None:
    runtime = build(False)
    runtime.execute(asking(greeting, NAMED))
    assert sent_format(model_server) == {
        "name": "templiqx_output",
        "strict": False,
        "schema": NAMED,
    }
    assert strict_metadata(exporter, runtime) == [False]
