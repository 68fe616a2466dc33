"""Responses that break HTTP/1.1 framing, written byte for byte by a raw loopback server.

Two promises: what a hostile response leaves on a keep-alive connection never becomes
the next call's response, and a response that cannot be read as HTTP/1.x is an invalid response
(permanent), not a retryable outage.
"""

from __future__ import annotations

import json
import time

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse import LangfuseTracedRuntime
from tests.conftest import BOTH_IO, GREETING, RuntimeFactory
from tests.loopback import chat_completion
from tests.raw_http import RawRequest, Respond, Step, http_response, raw_server

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO

HONEST = http_response(
    200, json.dumps(chat_completion(GREETING)).encode(), [("content-type", "application/json")]
)
SMUGGLED = http_response(
    200,
    json.dumps(chat_completion({"greeting": "smuggled"})).encode(),
    [("content-type", "application/json")],
)


def outcome(runtime: LangfuseTracedRuntime, request: ExecutionRequest) -> str:
    try:
        runtime.execute(request)
    except RuntimeFailureError as error:
        return error.code
    return "ok"


def code_for(reply: Respond, make_runtime: RuntimeFactory, request: ExecutionRequest) -> str:
    with raw_server(reply) as server:
        return outcome(make_runtime(base_url=server.base_url, tracing=False), request)


def first_then_honest(first: list[Step]) -> Respond:
    """The first request ever gets ``first``; every later one an honest completion."""
    served: list[int] = []

    def respond(request: RawRequest) -> list[Step]:
        served.append(1)
        return first if len(served) == 1 else [HONEST]

    return respond


SMUGGLING = {
    "204 + response": [b"HTTP/1.1 204 No Content\r\n\r\n" + SMUGGLED],
    "204, response later": [b"HTTP/1.1 204 No Content\r\n\r\n", 0.05, SMUGGLED],
    "304 + response": [b"HTTP/1.1 304 Not Modified\r\n\r\n" + SMUGGLED],
    "304 with length + response": [
        b"HTTP/1.1 304 Not Modified\r\ncontent-length: 5\r\n\r\n" + SMUGGLED
    ],
    "200 + response": [HONEST + SMUGGLED],
    "200, response later": [HONEST, 0.05, SMUGGLED],
}


@pytest.mark.parametrize("first", SMUGGLING.values(), ids=SMUGGLING.keys())
def test_stray_bytes_never_become_the_next_response(
    first: list[Step], make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with raw_server(first_then_honest(first)) as server:
        runtime = make_runtime(base_url=server.base_url, tracing=False)
        assert outcome(runtime, greeting_request) in (
            "ok",  # a valid 200 followed by junk may be taken before the junk arrives
            "TQX_RUNTIME_INVALID_RESPONSE",
            "TQX_RUNTIME_PERMANENT",  # a 304 is a non-2xx status
        )
        if 0.05 in first:
            time.sleep(0.15)  # the late response lands on the idle connection first
        for _ in range(3):
            receipt = runtime.execute(greeting_request)
            assert receipt.output == GREETING
        assert len(server.requests) == 4


def test_a_response_whose_end_the_byte_count_confirms_keeps_its_connection(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    """Closing every connection would be safe and slow: an honest one is reused."""
    with raw_server(lambda request: [HONEST]) as server:
        runtime = make_runtime(base_url=server.base_url, tracing=False)
        for _ in range(3):
            assert outcome(runtime, greeting_request) == "ok"
        assert [r.index_on_connection for r in server.requests] == [0, 1, 2]


def test_204_with_a_body_is_invalid(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    reply = b"HTTP/1.1 204 No Content\r\n\r\n" + SMUGGLED
    code = code_for(lambda request: reply, make_runtime, greeting_request)
    assert code == "TQX_RUNTIME_INVALID_RESPONSE"


NOT_HTTP = {
    "not a status line": b"hello there\r\n\r\n",
    "status not a number": b"HTTP/1.1 2x0 OK\r\ncontent-length: 2\r\n\r\n{}",
    "header without colon": b"HTTP/1.1 200 OK\r\nnot a header\r\ncontent-length: 2\r\n\r\n{}",
    "length not a number": b"HTTP/1.1 200 OK\r\ncontent-length: two\r\n\r\n{}",
    "length past int's digits": b"HTTP/1.1 200 OK\r\ncontent-length: "
    + b"9" * 5000
    + b"\r\n\r\n{}",
    "length in other digits": "HTTP/1.1 200 OK\r\ncontent-length: ²\r\n\r\n{}".encode(),
    "conflicting lengths": b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}",
    "bad chunk size": b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    "unknown transfer coding": b"HTTP/1.1 200 OK\r\ntransfer-encoding: bogus\r\n\r\n{}",
    "endless header": b"HTTP/1.1 200 OK\r\nx-pad: " + b"a" * 200_000 + b"\r\n\r\n",
}


@pytest.mark.parametrize("reply", NOT_HTTP.values(), ids=NOT_HTTP.keys())
def test_responses_that_are_not_http_are_invalid_not_unavailable(
    reply: bytes, make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    code = code_for(lambda request: [reply, None], make_runtime, greeting_request)
    assert code == "TQX_RUNTIME_INVALID_RESPONSE"  # permanent: retrying cannot help


def _head(status_line: bytes, *headers: bytes) -> bytes:
    return b"\r\n".join([status_line, b"content-type: application/json", *headers, b"", b""])


BODY = json.dumps(chat_completion(GREETING)).encode()
H2_GOAWAY = b"\x00\x00\x08\x07\x00\x00\x00\x00\x00" + bytes(8)  # a binary HTTP/2 frame
# What the README's failure table says, reply by reply: responses are read as HTTP/1.x
# (h11), so an HTTP/1.0 reply is accepted however it is framed, and any status line of the
# form HTTP/<digit>.<digit> is read the same way; what cannot be read as HTTP/1.x is invalid.
VERSIONS: dict[str, tuple[list[Step], str]] = {
    "1.0 with length": (
        [_head(b"HTTP/1.0 200 OK", b"content-length: %d" % len(BODY)) + BODY],
        "ok",
    ),
    "1.0 close-delimited": ([_head(b"HTTP/1.0 200 OK") + BODY, None], "ok"),
    "1.0 chunked": (
        [
            _head(b"HTTP/1.0 200 OK", b"transfer-encoding: chunked"),
            b"%x\r\n%s\r\n0\r\n\r\n" % (len(BODY), BODY),
            None,
        ],
        "ok",
    ),
    "1.1 close-delimited": ([_head(b"HTTP/1.1 200 OK") + BODY, None], "ok"),
    "2.0 status line": (
        [_head(b"HTTP/2.0 200 OK", b"content-length: %d" % len(BODY)) + BODY],
        "ok",
    ),
    # Without a length, the close is the end: a cut is only seen as a body that is not JSON.
    "1.0 close-delimited, cut": (
        [_head(b"HTTP/1.0 200 OK") + BODY[:40], None],
        "TQX_RUNTIME_INVALID_RESPONSE",
    ),
    "HTTP/2 status line": ([_head(b"HTTP/2 200") + BODY, None], "TQX_RUNTIME_INVALID_RESPONSE"),
    "ICY status line": ([_head(b"ICY 200 OK") + BODY, None], "TQX_RUNTIME_INVALID_RESPONSE"),
    "HTTP/2 binary frame": ([H2_GOAWAY, None], "TQX_RUNTIME_INVALID_RESPONSE"),
    # Closed before a status line and headers were complete: a connection cut short.
    "no status line (bare body)": ([BODY, None], "TQX_RUNTIME_UNAVAILABLE"),
}


@pytest.mark.parametrize(("steps", "expected"), VERSIONS.values(), ids=VERSIONS.keys())
def test_what_each_http_version_and_framing_gives(
    steps: list[Step],
    expected: str,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    assert code_for(lambda request: steps, make_runtime, greeting_request) == expected


CUT_SHORT = {
    "closed before a response": [None],
    "closed mid-body": [b'HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n{"id"', None],
    "closed mid-chunk": [b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n10\r\n{}", None],
}


@pytest.mark.parametrize("steps", CUT_SHORT.values(), ids=CUT_SHORT.keys())
def test_connections_cut_short_stay_retryable(
    steps: list[Step], make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    code = code_for(lambda request: steps, make_runtime, greeting_request)
    assert code == "TQX_RUNTIME_UNAVAILABLE"
