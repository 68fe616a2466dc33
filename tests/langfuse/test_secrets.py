"""No configured secret leaves through an error, a log record or an exported span."""

from __future__ import annotations

import dataclasses
import json
import logging
import traceback
from collections.abc import Callable

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import ExecutionRequest, RuntimeFailureError, to_diagnostic
from templiqx_langfuse import LangfuseTracedRuntime
from tests.conftest import BOTH_IO, MODEL_KEY, SECRET_KEY, RuntimeFactory
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
)

#: Every test here runs as a sync host and as an async host would call.
pytestmark = BOTH_IO


def secrets_of(runtime: LangfuseTracedRuntime) -> list[str]:
    """The exact configured secrets (the fixture gives each runtime its own public key)."""
    return [MODEL_KEY, runtime.langfuse_config.keys()[0], SECRET_KEY]


def echoing(
    status: int, secrets: list[str], *, content: bool = False
) -> Callable[[ServerRequest], Reply]:
    """A server that echoes every secret back: in the body, headers and status reason."""

    def respond(request: ServerRequest) -> Reply:
        auth = request.headers.get("authorization", "")
        leak = f"{auth} {' '.join(secrets)}"
        body = (
            json.dumps(chat_completion({"greeting": leak}))
            if content
            else json.dumps({"error": {"message": leak, "code": leak}})
        )
        headers = {"x-echo": leak, "retry-after": leak, "www-authenticate": leak}
        return Reply(status, headers, body.encode(), reason=f"Echo {MODEL_KEY}")

    return respond


def assert_clean(text: str, secrets: list[str]) -> None:
    for secret in secrets:
        assert secret not in text


@pytest.mark.parametrize("status", [200, 400, 401, 408, 429, 500, 503])
def test_secrets_echoed_by_the_server_never_leak(
    status: int,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    caplog: pytest.LogCaptureFixture,
) -> None:
    runtime = make_runtime()
    secrets = secrets_of(runtime)
    model_server.set_responder(echoing(status, secrets, content=status == 200))
    with caplog.at_level(logging.DEBUG):
        try:
            receipt = runtime.execute(greeting_request)
        except RuntimeFailureError as error:
            texts = [
                str(error),
                repr(error),
                error.failure.detail,
                json.dumps(dataclasses.asdict(error.failure)),
                to_diagnostic(error).model_dump_json(),
            ]
        else:
            # The model's own output is the caller's data and stays in the receipt verbatim;
            # only what leaves for Langfuse is redacted.
            assert MODEL_KEY in json.dumps(receipt.output)
            texts = []
        runtime.close()
    texts += [record.getMessage() for record in caplog.records]
    texts += [str(record.args) for record in caplog.records]
    for span in exporter.get_finished_spans():
        texts.append(json.dumps(dict(span.attributes or {}), default=str))
        texts.append(json.dumps(dict(span.resource.attributes), default=str))
        texts += [
            event.name + json.dumps(dict(event.attributes or {}), default=str)
            for event in span.events
        ]
    assert texts
    for text in texts:
        assert_clean(text, secrets)


def test_redaction_marker_replaces_secrets_in_spans(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    runtime = make_runtime()
    model_server.set_responder(echoing(200, secrets_of(runtime), content=True))
    runtime.execute(greeting_request)
    runtime.close()
    (span,) = exporter.get_finished_spans()
    assert "[REDACTED]" in json.dumps(dict(span.attributes or {}))


def test_a_traceback_rendered_with_its_locals_never_shows_the_key(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    """``pytest -l``, rich tracebacks and error trackers print every frame's locals: the
    wiring in the adapter's frame carries the authorization header, kept out of its repr."""
    model_server.set_responder(lambda request: Reply(503, {}, b"{}"))
    runtime = make_runtime(tracing=False)
    with pytest.raises(RuntimeFailureError) as raised:
        runtime.execute(greeting_request)
    shown = traceback.TracebackException.from_exception(raised.value, capture_locals=True)
    text = "".join(shown.format())
    assert "wiring" in text or "runtime" in text  # the frames with locals are there
    assert MODEL_KEY not in text
