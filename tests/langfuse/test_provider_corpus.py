"""Every real provider response in the shared corpus is classified correctly.

Each recorded interaction is served (status, headers, body) from a loopback server and
run through the real adapter, with the entry's ``validation_schema`` as output schema.
The entry's ``expected_outcome``, or one of its ``acceptable_alternatives``, is correct.
The four Responses-API entries (``responses_api_entries``) are not run: they answer
``POST /v1/responses``, an API this adapter never calls.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from templiqx_core import (
    CompiledInteraction,
    CompiledMessage,
    ExecutionRequest,
    RuntimeFailureError,
)
from tests.conftest import CORPUS, RuntimeFactory
from tests.loopback import LoopbackModelServer, Reply

PROVIDER_RESPONSES = CORPUS / "provider-responses"
OUTCOME_BY_CODE = {
    "TQX_RUNTIME_INVALID_RESPONSE": "invalid-response",
    "TQX_RUNTIME_RATE_LIMITED": "rate-limited",
    "TQX_RUNTIME_UNAVAILABLE": "unavailable",
    "TQX_RUNTIME_PERMANENT": "permanent",
    "TQX_RUNTIME_TIMEOUT": "timeout",
}
# Framing headers describe the recorded wire bytes; the body here is already decoded.
FRAMING = {"content-length", "transfer-encoding", "content-encoding", "connection"}


def entries() -> list[dict[str, Any]]:
    index = json.loads((PROVIDER_RESPONSES / "index.json").read_text())
    return [json.loads((PROVIDER_RESPONSES / e["file"]).read_text()) for e in index["entries"]]


ENTRIES = entries()


def as_reply(response: dict[str, Any]) -> Reply:
    headers = {k: v for k, v in response["headers"].items() if k.lower() not in FRAMING}
    if response.get("body") is not None:
        body = json.dumps(response["body"]).encode()
    else:
        body = (response.get("body_text") or "").encode()
    return Reply(response["status"], headers, body, reason=response.get("reason"))


@pytest.fixture(scope="module")
def corpus_server() -> Iterator[LoopbackModelServer]:
    server = LoopbackModelServer(lambda request: Reply(500)).start()
    yield server
    server.stop()


def interaction(entry: dict[str, Any], base: CompiledInteraction) -> CompiledInteraction:
    schema = entry.get("validation_schema") or {"type": "object"}
    return base.model_copy(
        update={
            "contract_id": entry["id"],
            "output_schema": schema,
            "messages": [CompiledMessage(role="user", content=f"corpus entry {entry['id']}")],
        }
    )


def test_corpus_is_present_and_complete() -> None:
    assert len(ENTRIES) == 59


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["id"] for e in ENTRIES])
def test_entry_is_classified_correctly(
    entry: dict[str, Any],
    corpus_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting: CompiledInteraction,
) -> None:
    corpus_server.set_responder(lambda request: as_reply(entry["response"]))
    runtime = make_runtime(base_url=corpus_server.base_url, tracing=False)
    try:
        receipt = runtime.execute(ExecutionRequest(interaction=interaction(entry, greeting)))
    except RuntimeFailureError as error:
        outcome = OUTCOME_BY_CODE[error.code]
        failure = error.failure
        hints = (entry.get("derived") or {}).get("rate_limit_headers") or {}
        if outcome == "rate-limited" and hints.get("retry_after_s") is not None:
            assert failure.retry_after_ms == int(hints["retry_after_s"] * 1000)
        body_text = json.dumps(entry["response"].get("body")) + (
            entry["response"].get("body_text") or ""
        )
        assert failure.detail not in body_text  # no provider text in the detail
    else:
        outcome = "ok-valid" if receipt.output_schema_valid else "ok-schema-invalid"
    accepted = [entry["expected_outcome"], *entry.get("acceptable_alternatives", [])]
    assert outcome in accepted, f"{entry['id']}: got {outcome}, expected one of {accepted}"
