"""A typed contract against the loopback model server, sync and async."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel

from templiqx_core import RuntimeFailureError, TypedContract
from templiqx_core._errors import OutputSchemaError
from templiqx_core._receipts import request_fingerprint
from tests.conftest import (
    BOTH_IO,
    LoopbackModelServer,
    RuntimeFactory,
    chat_completion,
    json_reply,
)

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
    answer, receipt = TYPED.run_receipt(runtime, {"subject": "Site down"})
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
