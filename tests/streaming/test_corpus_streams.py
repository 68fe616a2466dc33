"""Every real recorded stream passes the streaming conformance checks.

Each ``reference/corpus/provider-streams`` file (50 streams from 16 providers and
gateways) and each LiteLLM proxy stream is served byte for byte by a loopback server, cut
at random byte boundaries (fixed seed; the cuts fall inside SSE lines and UTF-8
sequences), once per stream: the sync and async socket layers take turns, and framing in
one piece or byte by byte is ``test_sse_framing``'s. The adapter must reproduce the
provider's text and tool calls exactly, end with one terminal event, and reach the
outcome listed here: a receipt where the assembled content is JSON (the one ``execute``
returns), otherwise the documented ``TQX_*`` code (README "Streaming host adapters").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest

from templiqx_core import ExecutionRequest, PortError
from templiqx_core.conformance import assemble_tool_calls, receipts_equal, run_stream
from tests.conftest import CORPUS, IO_MODES
from tests.loopback import LoopbackModelServer
from tests.streaming.conftest import HostFactory, split_at_random, streamed

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
#: One run per stream; the streams alternate between a sync and an async host.
PARAMS = [
    pytest.param(case, IO_MODES[n % 2], id=f"{IO_MODES[n % 2]}-{case['id']}")
    for n, case in enumerate(CASES)
]


def test_the_corpus_is_all_here() -> None:
    index = json.loads((STREAMS / "index.json").read_text(encoding="utf-8"))
    assert len([c for c in CASES if c["provider"] != "litellm-proxy"]) == 50
    assert index["counts"]["streams"] == 50


@pytest.mark.parametrize(("case", "io"), PARAMS, indirect=["io"])
def test_real_stream(
    case: dict[str, Any],
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    body = case["body"]
    pieces = split_at_random(body, seed=len(body))
    reply = streamed(body, pieces=pieces, headers=case["headers"], status=case["status"])
    stream_server.set_responder(lambda request: reply)
    host = make_host()

    run = run_stream(host, plain_request)  # one terminal event, last, agreeing with the outcome
    assert run.text == case["text"]  # the deltas, in order, are what the provider sent
    assert [(c.name, c.arguments) for c in assemble_tool_calls(run.events)] == case["tool_calls"]
    if case["outcome"] == "receipt":
        assert run.receipt is not None, run.error
        assert run.receipt.output == orjson.loads(case["text"])
        assert receipts_equal(host.execute(plain_request), run.receipt)  # execute agrees
    else:
        assert run.error is not None
        assert run.error.code == case["outcome"]
        with pytest.raises(PortError) as raised:
            host.execute(plain_request)
        assert raised.value.code == case["outcome"]  # execute agrees
