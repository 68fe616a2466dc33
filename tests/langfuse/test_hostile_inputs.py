"""Contract-side inputs the adapter must refuse (or neutralise) before any I/O.

Reserved request fields cannot be replaced through ``openai.*`` extensions (refused,
naming the key) nor through ``runtime_policy`` (never sent, listed as ignored). Values
JSON cannot carry become ``TQX_DATA_INVALID`` naming the field, never a raw exception;
``execute_streaming`` reports each with exactly one ``Failed``.
"""

from __future__ import annotations

from typing import Any

import pytest

from templiqx_core import (
    CompiledInteraction,
    ExecutionRequest,
    FailedEvent,
    InvalidData,
    PortError,
    StreamEvent,
)
from templiqx_langfuse._wire import RESERVED_FIELDS, build_request_body
from tests.conftest import GREETING, MODEL_KEY, RuntimeFactory
from tests.loopback import LoopbackModelServer


def with_(interaction: CompiledInteraction, **update: Any) -> ExecutionRequest:
    return ExecutionRequest(interaction=interaction.model_copy(update=update))


def deep(levels: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(levels):
        value = [value]
    return value


def assert_refused_before_io(
    request: ExecutionRequest,
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    naming: str,
) -> None:
    runtime = make_runtime()
    with pytest.raises(InvalidData) as raised:
        runtime.execute(request)
    assert raised.value.code == "TQX_DATA_INVALID"
    assert naming in str(raised.value)
    assert MODEL_KEY not in str(raised.value)
    events: list[StreamEvent] = []
    with pytest.raises(PortError):
        runtime.execute_streaming(request, events.append)
    assert len(events) == 1
    assert isinstance(events[0], FailedEvent)
    assert events[0].code == "TQX_DATA_INVALID"
    assert model_server.requests == []


@pytest.mark.parametrize("field", sorted(RESERVED_FIELDS))
def test_reserved_extensions_are_refused_naming_the_key(
    field: str,
    greeting: CompiledInteraction,
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
) -> None:
    value: Any = {"model": "other-model", "stream": True}.get(field, [])
    request = with_(greeting, extensions={f"openai.{field}": value})
    assert_refused_before_io(request, make_runtime, model_server, f"openai.{field}")


def test_reserved_policy_keys_are_never_sent_and_are_listed(
    greeting: CompiledInteraction,
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
) -> None:
    policy = {
        "temperature": 0,
        "model": "other-model",
        "stream": True,
        "messages": [],
        "response_format": {"type": "text"},
    }
    request = with_(greeting, runtime_policy=policy)
    assert make_runtime().execute(request).output == GREETING
    sent = model_server.requests[0].json()
    assert sent["model"] == "test-model"
    assert "stream" not in sent
    assert sent["messages"] == [{"role": m.role, "content": m.content} for m in greeting.messages]
    assert sent["response_format"]["type"] == "json_schema"
    assert sent["temperature"] == 0
    body = build_request_body(request.interaction, model="test-model", strict=True)
    assert body.ignored_policy_keys == ["messages", "model", "response_format", "stream"]


def test_other_extensions_still_reach_the_provider(
    greeting: CompiledInteraction,
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
) -> None:
    request = with_(greeting, extensions={"openai.reasoning_effort": "low", "other.x": 1})
    make_runtime().execute(request)
    sent = model_server.requests[0].json()
    assert sent["reasoning_effort"] == "low"
    assert "x" not in sent


UNSENDABLE = {
    "integer beyond 64 bits in policy": ({"runtime_policy": {"seed": 2**70}}, "64-bit"),
    "negative beyond 64 bits": ({"runtime_policy": {"max_tokens": -(2**64)}}, "64-bit"),
    "lone surrogate in a message": ("surrogate", "surrogate"),
    "integer beyond 64 bits in an extension": (
        {"extensions": {"openai.logit_bias": {"50256": 2**80}}},
        "64-bit",
    ),
    "lone surrogate in an extension": ({"extensions": {"openai.user": "\ud800"}}, "surrogate"),
    # Deeper than pydantic serializes (and than orjson's 254), shallow enough to build.
    "300 levels deep": ({"runtime_policy": {"stop": deep(300)}}, "nested too deeply"),
}


@pytest.mark.parametrize(("update", "naming"), UNSENDABLE.values(), ids=UNSENDABLE.keys())
def test_values_json_cannot_carry_are_invalid_data(
    update: Any,
    naming: str,
    greeting: CompiledInteraction,
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
) -> None:
    if update == "surrogate":
        messages = list(greeting.messages)
        messages[1] = messages[1].model_copy(update={"content": "Hello \ud800"})
        update = {"messages": messages}
    assert_refused_before_io(with_(greeting, **update), make_runtime, model_server, naming)
