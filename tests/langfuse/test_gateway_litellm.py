"""Behind the LiteLLM proxy: real recorded responses, replayed byte for byte with headers.

LiteLLM re-sends the upstream's retry hints only as ``llm_provider-retry-after(-ms)``
and rewrites a billing ``insufficient_quota`` 429 into a generic ``throttling_error``
(see reference/corpus/gateway-litellm/README.md). The adapter must keep the hint and
keep the quota error permanent.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse import RetryingRuntime
from tests.conftest import CORPUS, GREETING, RuntimeFactory
from tests.raw_http import RawRequest, Respond, raw_server

GATEWAY = CORPUS / "gateway-litellm"

# recording → (code or "ok", retry_after_ms)
EXPECTED: dict[str, tuple[str, int | None]] = {
    "plain/mock-ok.json": ("ok", None),
    "plain/up-ok.json": ("ok", None),
    "plain/up-429.json": ("TQX_RUNTIME_RATE_LIMITED", 1500),
    "plain/up-503.json": ("TQX_RUNTIME_UNAVAILABLE", 7000),
    "plain/up-quota.json": ("TQX_RUNTIME_PERMANENT", None),
    "plain/mock-rpm-429.json": ("TQX_RUNTIME_RATE_LIMITED", 60_000),
    "plain/mock-timeout-408.json": ("TQX_RUNTIME_TIMEOUT", None),
    "plain/mock-500.json": ("TQX_RUNTIME_UNAVAILABLE", None),
    "stream/mock-429.json": ("TQX_RUNTIME_RATE_LIMITED", None),
    "stream/mock-midstream-error.json": ("TQX_RUNTIME_UNAVAILABLE", None),
}


def recorded(name: str) -> bytes:
    """The response as the proxy sent it: status line, headers in order, body."""
    body = (GATEWAY / name).read_bytes()
    head = (GATEWAY / f"{name}.headers").read_text(encoding="utf-8").strip().splitlines()
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


def test_every_json_recording_is_classified() -> None:
    found = {
        str(path.relative_to(GATEWAY))
        for path in GATEWAY.rglob("*.json")
        if path.name != "request-body.json"
    }
    assert found == set(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_recorded_gateway_responses_map_as_specified(
    name: str, make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    code, retry_after_ms = EXPECTED[name]
    response = recorded(name)
    with raw_server(lambda request: response) as server:
        runtime = make_runtime(base_url=server.base_url, tracing=False)
        if code == "ok":
            assert runtime.execute(greeting_request).output == GREETING
            return
        with pytest.raises(RuntimeFailureError) as raised:
            runtime.execute(greeting_request)
    failure = raised.value.failure
    assert (failure.code.value, failure.retry_after_ms) == (code, retry_after_ms)
    # The provider's own reason is carried, on one line (issue 33: not thrown away).
    assert "\n" not in failure.detail
    if b'"message"' in (GATEWAY / name).read_bytes() and "stream/" not in name:
        assert "message=" in failure.detail


def sequence(*names: str) -> Respond:
    responses = iter([recorded(name) for name in names])

    def respond(request: RawRequest) -> bytes:
        return next(responses)

    return respond


def retried(
    first: str, make_runtime: RuntimeFactory, request: ExecutionRequest
) -> tuple[str, list[float], int]:
    """``first``, then a good completion, through ``RetryingRuntime``: outcome, waits, calls."""
    sleeps: list[float] = []
    with raw_server(sequence(first, "plain/mock-ok.json")) as server:
        inner = make_runtime(base_url=server.base_url, tracing=False)
        retrying = RetryingRuntime(inner, attempts=3, max_wait_s=10, sleep=sleeps.append)
        try:
            outcome = "ok" if retrying.execute(request).output == GREETING else "wrong output"
        except RuntimeFailureError as error:
            outcome = error.code
        return outcome, sleeps, len(server.requests)


def test_retries_wait_for_the_gateways_hint(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    assert retried("plain/up-429.json", make_runtime, greeting_request) == ("ok", [1.5], 2)


def test_a_quota_error_behind_the_gateway_is_not_retried(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    assert retried("plain/up-quota.json", make_runtime, greeting_request) == (
        "TQX_RUNTIME_PERMANENT",
        [],
        1,
    )


def test_corpus_files_are_untouched_http() -> None:
    """The replay sends the recorded Content-Length; it must match the recorded body."""
    for name in EXPECTED:
        head = (GATEWAY / f"{name}.headers").read_text(encoding="utf-8").lower()
        length = next(
            int(line.split(":", 1)[1])
            for line in head.splitlines()
            if line.startswith("content-length:")
        )
        assert length == len(Path(GATEWAY / name).read_bytes()), name
