"""Every failure row of SPEC §5.3, end to end, against real loopback sockets."""

from __future__ import annotations

import email.utils
import json
import socket
import threading
import time
from collections.abc import Iterator

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse._wire import MAX_RESPONSE_BYTES
from tests.conftest import BOTH_IO, MODEL_KEY, RuntimeFactory, closed_port
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    chat_completion,
    json_reply,
)

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO


PROVIDER_TEXT = "provider-says-something-private"


def completion(**message: object) -> Reply:
    body = chat_completion({"greeting": "x"})
    body["choices"][0]["message"].update(message)
    return json_reply(body)


def finish(reason: str) -> Reply:
    return json_reply(chat_completion({"greeting": "x"}, finish_reason=reason))


DATE_SENTINEL = "<http-date two minutes from now>"
ERROR_BODY = json.dumps({"error": {"message": PROVIDER_TEXT}}).encode()
QUOTA_BEHIND_GATEWAY = json.dumps(
    {
        "error": {
            "message": f"RateLimitError: You exceeded your current quota. {PROVIDER_TEXT}",
            "type": "throttling_error",
            "code": "429",
        }
    }
).encode()

MATRIX = [
    ("429 retry-after-ms", Reply(429, {"retry-after-ms": "750"}, ERROR_BODY), "RATE_LIMITED", 750),
    (
        "429 x-retry-after-ms",
        Reply(429, {"x-retry-after-ms": "1200"}, ERROR_BODY),
        "RATE_LIMITED",
        1200,
    ),
    ("429 retry-after seconds", Reply(429, {"retry-after": "3"}, ERROR_BODY), "RATE_LIMITED", 3000),
    (
        "429 retry-after date",
        Reply(429, {"retry-after": DATE_SENTINEL}, ERROR_BODY),
        "RATE_LIMITED",
        "date",
    ),
    (
        "429 llm_provider-retry-after-ms (LiteLLM)",
        Reply(429, {"llm_provider-retry-after-ms": "1500"}, ERROR_BODY),
        "RATE_LIMITED",
        1500,
    ),
    (
        "503 llm_provider-retry-after (LiteLLM)",
        Reply(503, {"llm_provider-retry-after": "7"}, ERROR_BODY),
        "UNAVAILABLE",
        7000,
    ),
    (
        "429 insufficient_quota",
        Reply(429, {"retry-after": "1"}, b'{"error": {"code": "insufficient_quota"}}'),
        "PERMANENT",
        None,
    ),
    (
        "429 quota rewritten by a gateway",
        Reply(429, {}, QUOTA_BEHIND_GATEWAY),
        "PERMANENT",
        None,
    ),
    ("204 no content", Reply(204, {}, b""), "INVALID_RESPONSE", None),
    ("408", Reply(408, {}, ERROR_BODY), "TIMEOUT", None),
    ("500", Reply(500, {}, ERROR_BODY), "UNAVAILABLE", None),
    ("502", Reply(502, {}, b"<html>bad gateway</html>"), "UNAVAILABLE", None),
    ("503 with hint", Reply(503, {"retry-after": "1"}, ERROR_BODY), "UNAVAILABLE", 1000),
    ("400", Reply(400, {}, ERROR_BODY), "PERMANENT", None),
    ("401", Reply(401, {}, ERROR_BODY), "PERMANENT", None),
    ("404", Reply(404, {}, ERROR_BODY), "PERMANENT", None),
    ("non-JSON body", Reply(200, {}, PROVIDER_TEXT.encode()), "INVALID_RESPONSE", None),
    ("empty choices", json_reply({"id": "x", "choices": []}), "INVALID_RESPONSE", None),
    ("content null", completion(content=None), "INVALID_RESPONSE", None),
    ("refusal", completion(refusal=PROVIDER_TEXT), "INVALID_RESPONSE", None),
    ("finish length", finish("length"), "INVALID_RESPONSE", None),
    ("finish content_filter", finish("content_filter"), "INVALID_RESPONSE", None),
    (
        "tool_calls",
        completion(content=None, tool_calls=[{"id": "c", "type": "function"}]),
        "INVALID_RESPONSE",
        None,
    ),
    ("content not JSON", completion(content=PROVIDER_TEXT), "INVALID_RESPONSE", None),
]


@pytest.mark.parametrize(("name", "reply", "code", "retry"), MATRIX, ids=[m[0] for m in MATRIX])
def test_status_and_body_faults(
    name: str,
    reply: Reply,
    code: str,
    retry: object,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    if reply.headers.get("retry-after") == DATE_SENTINEL:
        when = email.utils.formatdate(time.time() + 120, usegmt=True)
        reply = Reply(reply.status, {"retry-after": when}, reply.body)
    model_server.set_responder(lambda request: reply)
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime().execute(greeting_request)
    failure = raised.value.failure
    assert failure.code.value == f"TQX_RUNTIME_{code}"
    if retry == "date":
        assert failure.retry_after_ms is not None
        assert 100_000 <= failure.retry_after_ms <= 121_000
    else:
        assert failure.retry_after_ms == retry
    if reply.status >= 400 and b'"message"' in reply.body:
        # An error response's own reason is the caller's to see (bounded, redacted).
        assert PROVIDER_TEXT in failure.detail
    else:  # any other text of the provider's stays out of errors
        assert PROVIDER_TEXT not in str(raised.value)
        assert PROVIDER_TEXT not in failure.detail


def test_refused_connection_is_unavailable(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    runtime = make_runtime(base_url=f"http://127.0.0.1:{closed_port()}/v1")
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_UNAVAILABLE"


@pytest.fixture
def silent_server() -> Iterator[int]:
    """Accepts connections and never answers."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    listener.close()


def test_server_that_never_answers_times_out(
    silent_server: int, make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    runtime = make_runtime(base_url=f"http://127.0.0.1:{silent_server}/v1", timeout_s=0.5)
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"
    assert time.monotonic() - started < 0.5 + 1.0


TRICKLE_BODY = json.dumps(chat_completion({"greeting": "x"})).encode()


@pytest.mark.parametrize(
    "reply",
    [
        Reply(200, {"content-type": "application/json"}, TRICKLE_BODY, trickle_s=0.1),
        Reply(200, {}, b"{}", trickle_headers_s=0.1),
    ],
    ids=["trickled-body", "trickled-headers"],
)
def test_trickling_server_cannot_evade_the_deadline(
    reply: Reply,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """One byte every 100 ms: each read is quick, the round trip must still end on time."""
    model_server.set_responder(lambda request: reply)
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(timeout_s=1.0).execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"
    assert time.monotonic() - started < 1.0 + 1.0


def test_reset_mid_body_is_unavailable(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    body = json.dumps(chat_completion({"greeting": "x" * 5000})).encode()
    model_server.set_responder(lambda request: Reply(200, {}, body, reset_after=100))
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime().execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_UNAVAILABLE"


OVERSIZE = 3 * 1024 * 1024


@pytest.mark.parametrize(
    "framing",
    [{}, {"omit_length": True}, {"chunked": True}, {"declared_length": 1000}],
    ids=["content-length", "no-length", "chunked", "lying-length"],
)
def test_oversize_bodies_are_abandoned(
    framing: dict[str, object],
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    content = json.dumps({"greeting": "x" * OVERSIZE})
    body = json.dumps(chat_completion(content)).encode()
    model_server.set_responder(lambda request: Reply(200, {}, body, **framing))  # type: ignore[arg-type]
    # Count the bytes the adapter actually reads off the socket.
    import httpx

    read = 0
    original = httpx.Response.iter_bytes

    def counting(self: httpx.Response, chunk_size: int | None = None) -> Iterator[bytes]:
        nonlocal read
        for chunk in original(self, chunk_size):
            read += len(chunk)
            yield chunk

    monkeypatch.setattr(httpx.Response, "iter_bytes", counting)
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime().execute(greeting_request)
    if framing == {"declared_length": 1000}:
        # The server claims 1000 bytes; the client reads exactly that and finds it truncated.
        assert raised.value.code == "TQX_RUNTIME_INVALID_RESPONSE"
        assert read <= 1000
        return
    assert raised.value.code == "TQX_RUNTIME_INVALID_RESPONSE"
    assert "exceeds" in raised.value.failure.detail
    assert read <= MAX_RESPONSE_BYTES + 256 * 1024  # stopped within one chunk of the limit


def test_request_reaches_the_server_as_built(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    make_runtime().execute(greeting_request)
    (request,) = model_server.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == f"Bearer {MODEL_KEY}"
    assert request.json()["model"] == "test-model"


def test_invalid_output_schema_is_refused_before_any_io(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    from templiqx_core import InvalidData

    broken = greeting_request.interaction.model_copy(update={"output_schema": {"type": "strin"}})
    with pytest.raises(InvalidData, match="output_schema"):
        make_runtime().execute(ExecutionRequest(interaction=broken))
    assert model_server.requests == []


def test_content_as_typed_parts_is_read_as_their_text(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    greeting_request: ExecutionRequest,
) -> None:
    """Mistral's magistral answers ``content`` as a list of parts (thinking, then text):
    the answer is the text, as the streaming host reads it, not the list as the output."""
    body = chat_completion({"greeting": "Hello Ryan"})
    body["choices"][0]["message"]["content"] = [
        {"type": "thinking", "thinking": [{"type": "text", "text": "They want a greeting."}]},
        {"type": "text", "text": '{"greeting": '},
        {"type": "text", "text": '"Hello Ryan"}'},
    ]
    model_server.set_responder(lambda request: json_reply(body))
    receipt = make_runtime(tracing=False).execute(greeting_request)
    assert receipt.output == {"greeting": "Hello Ryan"}
    assert receipt.output_schema_valid


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
@pytest.mark.parametrize(
    ("status", "headers", "code", "retry"),
    [
        (503, {}, "TQX_RUNTIME_UNAVAILABLE", None),
        (429, {"retry-after": "2"}, "TQX_RUNTIME_RATE_LIMITED", 2000),
        (400, {}, "TQX_RUNTIME_PERMANENT", None),
    ],
)
def test_an_error_page_over_the_size_bound_is_still_its_status(
    make_runtime: RuntimeFactory,
    model_server: LoopbackModelServer,
    greeting_request: ExecutionRequest,
    chunked: bool,
    status: int,
    headers: dict[str, str],
    code: str,
    retry: int | None,
) -> None:
    """A proxy's 3 MiB error page was TQX_RUNTIME_INVALID_RESPONSE ("body exceeds"): a 503
    or 429 no longer retryable, its hint lost. The status names it; the page is unread."""
    page = b"<p>busy</p>" * (MAX_RESPONSE_BYTES // 8)
    reply = Reply(status, {"content-type": "text/html", **headers}, page, chunked=chunked)
    model_server.set_responder(lambda request: reply)
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(tracing=False).execute(greeting_request)
    assert (raised.value.code, raised.value.failure.retry_after_ms) == (code, retry)
    assert raised.value.failure.detail == f"model gateway returned HTTP {status}"
