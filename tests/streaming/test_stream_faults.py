"""Mid-stream faults over real sockets: each ends in one ``Failed`` with its documented
code after the deltas received so far, then the same error is raised."""

from __future__ import annotations

import json
import time
import traceback

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_core.conformance import (
    check_delta_order,
    check_midstream_failure,
    check_size_bound,
    run_stream,
)
from tests.conftest import BOTH_IO
from tests.loopback import LoopbackModelServer, Reply
from tests.streaming.conftest import MODEL_KEY, HostFactory, chunk, sse, streamed, text_stream

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO

PARTS = ['{"greeting": ', '"Hel', "lo Ry", 'an"}']
HEAD = sse(*[chunk(p) for p in PARTS[:2]], done=False)  # two deltas, then trouble
SO_FAR = "".join(PARTS[:2])


def serve(server: LoopbackModelServer, reply: Reply) -> None:
    server.set_responder(lambda request: reply)


def test_connection_reset_after_some_deltas(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    serve(
        stream_server,
        Reply(200, {"content-type": "text/event-stream"}, pieces=(HEAD, 0.05), reset_after=0),
    )
    check_midstream_failure(
        make_host(), plain_request, expected_text=SO_FAR, expected_code="TQX_RUNTIME_UNAVAILABLE"
    )


def test_stall_past_the_deadline(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    serve(stream_server, streamed(HEAD, pieces=(HEAD, 5.0, text_stream(PARTS[2:]))))
    started = time.monotonic()
    check_midstream_failure(
        make_host(timeout_s=0.5),
        plain_request,
        expected_text=SO_FAR,
        expected_code="TQX_RUNTIME_TIMEOUT",
    )
    assert time.monotonic() - started < 3.0  # the deadline, not the stall, ended it


def test_a_trickle_cannot_evade_the_deadline(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    # Every piece arrives well within any per-read timeout; the whole stream does not.
    body = text_stream(["x"] * 200)
    serve(
        stream_server,
        streamed(body, pieces=[body[i : i + 40] for i in range(0, len(body), 40)], pause_s=0.02),
    )
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        make_host(timeout_s=0.4).execute(plain_request)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"
    assert time.monotonic() - started < 2.0


def test_size_bound_on_the_stream(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    # A valid JSON answer of 2 MB of deltas, paced so that socket buffers cannot swallow it
    # whole before the client hangs up; the bound is 16 KiB.
    body = sse(
        chunk('{"greeting": "'),
        *[chunk("a" * 1000) for _ in range(2000)],
        chunk('"}'),
        chunk(finish="stop"),
    )
    pieces = tuple(body[i : i + 8192] for i in range(0, len(body), 8192))
    serve(stream_server, streamed(body, pieces=pieces, pause_s=0.001))  # paced: not all
    before = stream_server.bytes_sent
    check_size_bound(
        make_host(max_response_bytes=16 * 1024),
        plain_request,
        max_bytes=16 * 1024,
        bytes_sent=lambda: stream_server.bytes_sent - before,
    )


@pytest.mark.parametrize(
    ("error", "event", "code"),
    [
        ({"message": "overloaded", "type": "server_error"}, None, "TQX_RUNTIME_UNAVAILABLE"),
        ({"message": "slow down", "code": 429}, None, "TQX_RUNTIME_RATE_LIMITED"),
        ({"message": "bad tool call", "status_code": 400}, None, "TQX_RUNTIME_PERMANENT"),
        ({"message": "upstream", "code": "502"}, None, "TQX_RUNTIME_UNAVAILABLE"),
        ({"message": "took too long", "status": 408}, None, "TQX_RUNTIME_TIMEOUT"),
        ({"message": f"key {MODEL_KEY} leaked"}, "error", "TQX_RUNTIME_UNAVAILABLE"),
    ],
    ids=["server-error", "429", "400", "502-string", "408", "event-error-with-secret"],
)
def test_error_event_after_deltas(
    error: dict[str, object],
    event: str | None,
    code: str,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    data = json.dumps(error if event else {"error": error})
    tail = (f"event: {event}\n" if event else "") + f"data: {data}\n\n"
    serve(stream_server, streamed(HEAD + tail.encode()))
    host = make_host()
    check_midstream_failure(host, plain_request, expected_text=SO_FAR, expected_code=code)
    run = run_stream(host, plain_request)
    failed = run.events[-1]
    assert MODEL_KEY not in failed.model_dump_json()  # provider text never enters a message
    assert "leaked" not in failed.model_dump_json()


def test_no_done_after_finish_reason_completes(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    serve(stream_server, streamed(text_stream(PARTS, done=False)))
    check_delta_order(make_host(), plain_request, expected_text="".join(PARTS))


def test_no_done_and_no_finish_reason_is_a_cut_stream(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    serve(stream_server, streamed(HEAD))
    check_midstream_failure(
        make_host(), plain_request, expected_text=SO_FAR, expected_code="TQX_RUNTIME_UNAVAILABLE"
    )


def test_garbage_lines_that_are_no_field_are_ignored(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    garbage = b'garbage\nHTTP/1.1 200 OK\n{"not": "a field"}\n\x00\x01\x02\n\n'
    body = garbage + text_stream(PARTS).replace(b"\n\n", b"\n" + garbage, 2)
    serve(stream_server, streamed(body))
    check_delta_order(make_host(), plain_request, expected_text="".join(PARTS))


@pytest.mark.parametrize("data", [b"not json", b'{"truncated": ', b"\xff\xfe"])
def test_garbage_data_is_an_invalid_response(
    data: bytes,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    serve(stream_server, streamed(HEAD + b"data: " + data + b"\n\n" + text_stream(PARTS[2:])))
    check_midstream_failure(
        make_host(),
        plain_request,
        expected_text=SO_FAR,
        expected_code="TQX_RUNTIME_INVALID_RESPONSE",
    )


@pytest.mark.parametrize(
    ("reply", "code"),
    [
        (
            Reply(429, {"retry-after": "2", "content-type": "application/json"}, b"{}"),
            "TQX_RUNTIME_RATE_LIMITED",
        ),
        (Reply(503, {"content-type": "text/plain"}, b"down"), "TQX_RUNTIME_UNAVAILABLE"),
        (
            Reply(401, {"content-type": "application/json"}, b'{"error": {}}'),
            "TQX_RUNTIME_PERMANENT",
        ),
    ],
    ids=["429", "503", "401"],
)
def test_http_errors_before_the_stream(
    reply: Reply,
    code: str,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    serve(stream_server, reply)
    run = run_stream(make_host(), plain_request)
    assert run.error is not None
    assert run.error.code == code
    assert run.deltas == []
    if code == "TQX_RUNTIME_RATE_LIMITED":
        assert isinstance(run.error, RuntimeFailureError)
        assert run.error.failure.retry_after_ms == 2000


def test_a_gateway_that_ignores_stream_true(
    stream_server: LoopbackModelServer, make_host: HostFactory, plain_request: ExecutionRequest
) -> None:
    body = {
        "id": "x",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "".join(PARTS)},
            }
        ],
    }
    serve(
        stream_server, Reply(200, {"content-type": "application/json"}, json.dumps(body).encode())
    )
    check_delta_order(make_host(), plain_request, expected_text="".join(PARTS))


@pytest.mark.parametrize("status", [503, 200])
def test_a_failed_stream_s_traceback_with_its_locals_never_shows_the_key(
    status: int,
    stream_server: LoopbackModelServer,
    make_host: HostFactory,
    plain_request: ExecutionRequest,
) -> None:
    """``pytest -l`` and error trackers print every frame's locals: the request the host
    builds carries the authorization header, and its repr hides it (an error status, and
    a stream cut before its end)."""
    body = sse(chunk('{"greeting": ')) if status == 200 else b"{}"
    stream_server.set_responder(lambda request: streamed(body, status=status))
    with pytest.raises(RuntimeFailureError) as raised:
        make_host().execute(plain_request)
    shown = traceback.TracebackException.from_exception(raised.value, capture_locals=True)
    text = "".join(shown.format())
    assert "SecretHeaders(" in text  # the frame holding the request is there
    assert MODEL_KEY not in text
