"""A typed contract against the loopback model server, sync and async."""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Iterator
from typing import Literal

import pytest
from pydantic import BaseModel, field_validator

from templiqx_core import RuntimeFailureError, TypedContract
from templiqx_core._errors import OutputSchemaError, OutputTypeError
from templiqx_core._receipts import request_fingerprint
from templiqx_langfuse import collect_traces
from tests.conftest import (
    BOTH_IO,
    LoopbackModelServer,
    Reply,
    RuntimeFactory,
    chat_completion,
    json_reply,
)
from tests.core.test_typed_contracts import arun_receipt, run_receipt

pytestmark = BOTH_IO


class Ticket(BaseModel):
    subject: str
    tier: Literal["free", "pro"] = "free"


class Triage(BaseModel):
    priority: int
    summary: str


TYPED = TypedContract.define(
    id="triage",
    version="1",
    output=Triage,
    inputs=Ticket,
    messages=[("system", "Triage."), ("user", "{{ inputs.tier | upper }}: {{ inputs.subject }}")],
    evals=[
        {
            "id": "outage",
            "inputs": {"subject": "Site down", "tier": "pro"},
            "fake_output": {"priority": 1, "summary": "down"},
            "assert": [{"pointer": "/priority", "equals": 1}],
        }
    ],
)


def test_run_sends_the_strict_schema_and_returns_the_model(
    make_runtime: RuntimeFactory, model_server: LoopbackModelServer
) -> None:
    server = model_server
    server.set_responder(lambda _: json_reply(chat_completion({"priority": 1, "summary": "down"})))
    runtime = make_runtime(tracing=False)
    answer, receipt = run_receipt(TYPED, runtime, {"subject": "Site down"})
    assert answer == Triage(priority=1, summary="down")
    [sent] = server.requests
    body = sent.json()
    assert body["messages"][1]["content"] == "FREE: Site down"
    assert body["response_format"]["json_schema"]["schema"]["required"] == ["priority", "summary"]
    assert receipt.request_fingerprint == request_fingerprint(
        TYPED.compile({"subject": "Site down"})
    )


def test_failures_are_the_runtime_s_typed_errors(
    make_runtime: RuntimeFactory, model_server: LoopbackModelServer
) -> None:
    server = model_server
    server.set_responder(lambda _: json_reply({"error": {"message": "no"}}, status=503))
    with pytest.raises(RuntimeFailureError):
        TYPED.run(make_runtime(tracing=False), Ticket(subject="x"))
    server.set_responder(lambda _: json_reply(chat_completion({"priority": "high"})))
    with pytest.raises(OutputSchemaError, match="/priority"):
        TYPED.run(make_runtime(tracing=False), Ticket(subject="x"))


class Brief(Triage):
    """Stricter than its schema: a summary of at most 8 characters."""

    @field_validator("summary")
    @classmethod
    def _short(cls, value: str) -> str:
        if len(value) > 8:
            raise ValueError("at most 8 characters")
        return value


BRIEF = TypedContract.define(
    id="brief", version="1", output=Brief, inputs=Ticket, messages=[("user", "{{ inputs.tier }}")]
)


def answers(*contents: object) -> Iterator[Reply]:
    return iter(json_reply(chat_completion(content)) for content in contents)


def test_repair_sends_the_model_s_refusal_back_and_returns_the_repaired_answer(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    io: str,
    event_loop_runner: asyncio.Runner,
) -> None:
    replies = answers("Priority one!", {"priority": 1, "summary": "the site is down"}, ANSWER)
    model_server.set_responder(lambda _: next(replies))
    runtime = make_runtime()
    with collect_traces() as traces:
        if io == "async":
            call = arun_receipt(BRIEF, runtime, TICKET, repair=3)  # in this context (the traces)
            answer, receipt = event_loop_runner.run(call, context=contextvars.copy_context())
        else:
            answer, receipt = run_receipt(BRIEF, runtime, TICKET, repair=3)
    assert answer == Brief(**ANSWER)
    assert [ref.trace_id for ref in traces] == [traces[0].trace_id] * 3  # one trace, 3 tries
    assert receipt.request_fingerprint == request_fingerprint(BRIEF.compile(TICKET))
    first, second, third = (sent.json()["messages"] for sent in model_server.requests)
    assert second[:-2] == first  # one round trip per try, the conversation growing
    assert third[:-2] == second
    assert second[-2] == {"role": "assistant", "content": "Priority one!"}
    assert "- message content is not JSON" in second[-1]["content"]
    assert third[-2]["content"] == '{"priority":1,"summary":"the site is down"}'
    assert "- /summary: Value error, at most 8 characters" in third[-1]["content"]


def test_repair_stops_at_its_tries_with_the_model_s_typed_error(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    io: str,
    event_loop_runner: asyncio.Runner,
) -> None:
    long = {"priority": 1, "summary": "the site is down"}
    model_server.set_responder(lambda _: json_reply(chat_completion(long)))
    runtime = make_runtime(tracing=False)
    if io == "async":
        with pytest.raises(OutputTypeError, match="/summary"):
            event_loop_runner.run(BRIEF.arun(runtime, TICKET, repair=2))
    else:
        with pytest.raises(OutputTypeError, match="/summary"):
            BRIEF.run(runtime, TICKET, repair=2)
    assert len(model_server.requests) == 2


ANSWER = {"priority": 1, "summary": "down"}
TICKET = {"subject": "Site down"}
