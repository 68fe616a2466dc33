"""Every real recorded stream passes the streaming conformance checks, whole and split.

Each ``reference/corpus/provider-streams`` file (50 streams from 16 providers and
gateways) and each LiteLLM proxy stream is served byte for byte by a loopback server,
once in one piece and once cut at random byte boundaries (fixed seed; the cuts fall
inside SSE lines and UTF-8 sequences). The adapter must reproduce the provider's text
and tool calls exactly, end with one terminal event, and reach the outcome listed here:
a receipt where the assembled content is JSON (as ``execute`` would), otherwise the
documented ``TQX_*`` code (README "Streaming host adapters").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from templiqx_core import ExecutionRequest, PortError
from templiqx_core.conformance import (
    check_delta_order,
    check_single_terminal,
    check_streaming_parity,
    check_tool_call_assembly,
    run_stream,
)
from templiqx_langfuse.testing.server import LoopbackModelServer
from tests.conftest import BOTH_IO, CORPUS
from tests.streaming.conftest import HostFactory, split_at_random, streamed

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO

STREAMS = CORPUS / "provider-streams"
LITELLM = CORPUS / "gateway-litellm" / "stream"

INVALID = "TQX_RUNTIME_INVALID_RESPONSE"
# Reviewed by hand, file by file: streams whose content is JSON text give a receipt (the
# output is that JSON); an `{"error": …}` event maps by the status it names.
RECEIPT = {"001", "004", "005", "051", "060", "062"}
CODES = {"031": "TQX_RUNTIME_PERMANENT", "040": "TQX_RUNTIME_PERMANENT"}


def _corpus_case(path: Path) -> dict[str, Any]:
    data = json.loads(path.read_text(encoding="utf-8"))
    number = path.name[:3]
    expected = data["expected"]
    headers = {k: v for k, v in data["response"]["headers"].items() if k.lower() == "content-type"}
    return {
        "id": path.stem,
        "provider": data["provider"],
        "status": data["response"]["status"],
        "headers": headers,
        "body": data["response"]["body_sse"].encode("utf-8"),
        "text": expected["text"] or "",
        "tool_calls": [(c["name"], c["arguments"]) for c in expected["tool_calls"] or []],
        "outcome": "receipt" if number in RECEIPT else CODES.get(number, INVALID),
    }


def _litellm_case(name: str, text: str, outcome: str) -> dict[str, Any]:
    head, *lines = (LITELLM / f"{name}.headers").read_text(encoding="utf-8").splitlines()
    headers = dict(line.split(": ", 1) for line in lines if ": " in line)
    content_type = {k: v for k, v in headers.items() if k.lower() == "content-type"}
    return {
        "id": f"litellm-{name}",
        "provider": "litellm-proxy",
        "status": int(head.split()[1]),
        "headers": content_type,
        "body": (LITELLM / name).read_bytes(),
        "text": text,
        "tool_calls": [],
        "outcome": outcome,
    }


CASES = [_corpus_case(p) for p in sorted(STREAMS.glob("[0-9]*.json"))] + [
    _litellm_case("mock-ok.sse", '{"greeting": "Hello Ryan"}', "receipt"),
    _litellm_case("mock-ok-include-usage.sse", '{"greeting": "Hello Ryan"}', "receipt"),
    _litellm_case("mock-notjson.sse", "Hello Ryan, greetings from Blinqx!", INVALID),
    _litellm_case("mock-429.json", "", "TQX_RUNTIME_RATE_LIMITED"),
    _litellm_case("mock-midstream-error.json", "", "TQX_RUNTIME_UNAVAILABLE"),
]
PARAMS = [
    pytest.param(case, mode, id=f"{mode}-{case['id']}")
    for case in CASES
    for mode in ("whole", "split")
]


def test_the_corpus_is_all_here() -> None:
    index = json.loads((STREAMS / "index.json").read_text(encoding="utf-8"))
    assert len([c for c in CASES if c["provider"] != "litellm-proxy"]) == 50
    assert index["counts"]["streams"] == 50


@pytest.mark.parametrize(("case", "mode"), PARAMS)
def test_real_stream(
    case: dict[str, Any],
    mode: str,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    body = case["body"]
    pieces = (body,) if mode == "whole" else split_at_random(body, seed=len(body))
    reply = streamed(body, pieces=pieces, headers=case["headers"], status=case["status"])
    stream_server.set_responder(lambda request: reply)
    host = make_host()

    check_delta_order(host, plain_request, expected_text=case["text"])
    check_tool_call_assembly(host, plain_request, expected=case["tool_calls"])
    check_single_terminal(host, plain_request)
    run = run_stream(host, plain_request)
    if case["outcome"] == "receipt":
        assert run.receipt is not None, run.error
        assert run.receipt.output == orjson.loads(case["text"])
        check_streaming_parity(host, plain_request)
    else:
        assert run.error is not None
        assert run.error.code == case["outcome"]
        with pytest.raises(PortError) as raised:
            host.execute(plain_request)
        assert raised.value.code == case["outcome"]  # execute agrees
