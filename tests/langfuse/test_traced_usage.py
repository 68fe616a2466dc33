"""``TracedReceipt.usage``: the tokens a call used, whenever the provider reported them,
traced or not (issue 33 item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from templiqx_core import ExecutionRequest
from templiqx_langfuse import Usage
from tests.conftest import BOTH_IO, GREETING, RuntimeFactory
from tests.loopback import LoopbackModelServer, chat_completion, json_reply

pytestmark = BOTH_IO

REPORTED = {
    "prompt_tokens": 100,
    "completion_tokens": 50,
    "total_tokens": 150,
    "prompt_tokens_details": {"cached_tokens": 40, "audio_tokens": 5},
    "completion_tokens_details": {"reasoning_tokens": 30},
}


def replying(server: LoopbackModelServer, body: dict[str, Any]) -> None:
    server.set_responder(lambda r: json_reply(body))


@pytest.mark.parametrize("tracing", [True, False], ids=["traced", "untraced"])
def test_the_reported_usage_reaches_the_host(
    tracing: bool,
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    greeting_request: ExecutionRequest,
) -> None:
    replying(model_server, chat_completion(GREETING, usage=REPORTED))
    traced = make_runtime(tracing=tracing).execute_traced(greeting_request)
    assert (traced.trace_id is not None) is tracing
    assert traced.usage == Usage(
        input_tokens=100,
        output_tokens=50,
        total_tokens=150,
        cached_tokens=40,
        reasoning_tokens=30,
        details={
            "input": 55,
            "output": 20,
            "total": 150,
            "input_cached_tokens": 40,
            "input_audio_tokens": 5,
            "output_reasoning_tokens": 30,
        },
    )


def test_usage_without_details_has_no_cached_or_reasoning_count(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    greeting_request: ExecutionRequest,
) -> None:
    usage = {"prompt_tokens": 20, "completion_tokens": 7, "total_tokens": 27}
    replying(model_server, chat_completion(GREETING, usage=usage))
    traced = make_runtime().execute_traced(greeting_request)
    assert traced.usage is not None
    assert (traced.usage.input_tokens, traced.usage.output_tokens) == (20, 7)
    assert (traced.usage.cached_tokens, traced.usage.reasoning_tokens) == (None, None)


def test_no_reported_usage_is_none(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    greeting_request: ExecutionRequest,
) -> None:
    body = chat_completion(GREETING)
    del body["usage"]
    replying(model_server, body)
    assert make_runtime().execute_traced(greeting_request).usage is None
