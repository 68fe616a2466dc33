"""Deadlines are hard, whoever built the client; proxies only when asked for."""

from __future__ import annotations

import base64
import time

import pytest

from templiqx_core import ExecutionRequest, RuntimeFailureError
from templiqx_langfuse import DeadlineTransport, RetryingRuntime
from tests.conftest import BOTH_IO, GREETING, MODEL_KEY, RuntimeFactory, closed_port
from tests.loopback import LoopbackModelServer, Reply

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO


SLACK_S = 0.75  # generous: 2 shared cores
ERROR_BODY_FIELD = b'{"error": {"message": "busy"}}'


def timed_failure(
    runtime: RetryingRuntime, request: ExecutionRequest, label: str
) -> tuple[RuntimeFailureError, float]:
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(request)
    elapsed = time.monotonic() - started
    print(f"{label}: ended after {elapsed:.3f} s")
    return raised.value, elapsed


def test_retrying_runtime_ends_within_its_deadline(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """Each attempt may take 5 s; the wrapper's 1 s deadline still ends the whole call."""
    model_server.set_responder(lambda request: Reply(hang_s=10))
    retrying = RetryingRuntime(
        make_runtime(timeout_s=5.0, tracing=False), attempts=10, base_wait_s=0.01, deadline_s=1.0
    )
    error, elapsed = timed_failure(retrying, greeting_request, "hang, deadline_s=1, timeout_s=5")
    assert error.code == "TQX_HOST_RETRY_EXHAUSTED"
    assert "TQX_RUNTIME_TIMEOUT" in str(error)
    assert elapsed < 1.0 + SLACK_S


def test_each_attempt_gets_only_what_is_left(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """503 with a 0.4 s hint, then a server that hangs: the second attempt gets ~0.6 s."""
    replies = iter([Reply(503, {"retry-after-ms": "400"}, ERROR_BODY_FIELD)])
    model_server.set_responder(lambda request: next(replies, Reply(hang_s=10)))
    retrying = RetryingRuntime(
        make_runtime(timeout_s=5.0, tracing=False), attempts=3, deadline_s=1.0
    )
    error, elapsed = timed_failure(retrying, greeting_request, "503 then hang, deadline_s=1")
    assert error.code == "TQX_HOST_RETRY_EXHAUSTED"
    assert len(model_server.requests) == 2
    assert 0.9 < elapsed < 1.0 + SLACK_S


def test_a_deadline_shorter_than_a_hint_gives_up_without_waiting(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(lambda request: Reply(429, {"retry-after": "30"}, ERROR_BODY_FIELD))
    retrying = RetryingRuntime(make_runtime(tracing=False), attempts=3, deadline_s=1.0)
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        retrying.execute(greeting_request)
    assert raised.value.code == "TQX_HOST_RETRY_EXHAUSTED"
    assert raised.value.failure.retry_after_ms == 30_000
    assert time.monotonic() - started < 0.5


def test_a_hosts_deadline_transport_keeps_the_deadline(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    lent = DeadlineTransport()
    model_server.set_responder(lambda request: Reply(200, {}, b"{}", trickle_headers_s=0.1))
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        make_runtime(transport=lent, timeout_s=1.0, tracing=False).execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_TIMEOUT"
    assert time.monotonic() - started < 1.0 + SLACK_S
    lent.close()


# -- proxies: explicit only --------------------------------------------------------


def origin(server: LoopbackModelServer) -> str:
    return server.base_url.removesuffix("/v1")


def test_environment_proxies_are_ignored(
    monkeypatch: pytest.MonkeyPatch,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    dead = f"http://127.0.0.1:{closed_port()}"
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "all_proxy"):
        monkeypatch.setenv(name, dead)
    assert make_runtime(tracing=False).execute(greeting_request).output == GREETING
    assert model_server.requests[0].path == "/v1/chat/completions"


def test_an_explicit_proxy_carries_the_call_and_its_credentials_stay_secret(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """The loopback server plays the proxy; the model host itself is unreachable."""
    unreachable = f"http://127.0.0.1:{closed_port()}/v1"
    proxy = origin(model_server).replace("http://", "http://user:proxy-pass-0123@")
    runtime = make_runtime(base_url=unreachable, proxy=proxy, tracing=False)
    assert runtime.execute(greeting_request).output == GREETING
    seen = model_server.requests[0]
    assert seen.path == f"{unreachable}/chat/completions"  # absolute form: a proxy request
    expected = base64.b64encode(b"user:proxy-pass-0123").decode()
    assert seen.headers["proxy-authorization"] == f"Basic {expected}"
    # Over plain http:// the proxy sees the model key too (README: use https:// upstreams).
    assert seen.headers["authorization"] == f"Bearer {MODEL_KEY}"
    assert runtime.redactor.text("x proxy-pass-0123 y") == "x [REDACTED] y"


def test_an_unreachable_proxy_is_unavailable_without_its_password(
    make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    proxy = f"http://user:proxy-pass-0123@127.0.0.1:{closed_port()}"
    runtime = make_runtime(base_url="https://api.invalid/v1", proxy=proxy, tracing=False)
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    assert raised.value.code == "TQX_RUNTIME_UNAVAILABLE"
    assert "proxy-pass-0123" not in str(raised.value)
