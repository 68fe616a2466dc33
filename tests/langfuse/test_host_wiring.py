"""``building_blocks.HostWiring``: a third host adapter gets the shared guarantees for free.

``TinyHost`` is what another provider's adapter would be: its own identity, endpoint path
and media type, its own wire handling, and everything else from ``HostWiring``. Run
against the loopback server it must keep the Langfuse adapter's rules: the round-trip
deadline, the key kept out of failures and logs, one generation per call, and ``close``
releasing what the wiring built (and only that).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from typing import Any, Unpack

import httpx
import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import (
    AdapterDescriptor,
    ExecutionRequest,
    InvalidData,
    RuntimeAdapter,
    RuntimeFailureError,
    codes,
)
from templiqx_core.adapters import Produced, RuntimeCall
from templiqx_langfuse import (
    REDACTED,
    AsyncDeadlineTransport,
    DeadlineTransport,
    LangfuseConfig,
    LangfuseTracedRuntime,
    ModelConfig,
)
from templiqx_langfuse._host import Tracing
from templiqx_langfuse._redaction import live_redactors
from templiqx_langfuse.building_blocks import (
    HostWiring,
    WiringOptions,
    failure_for_status,
    open_bounded,
    parse_completion,
)
from tests.conftest import GREETING, MODEL_KEY, PUBLIC_KEY, SECRET_KEY
from tests.langfuse.test_tracing import metadata
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    chat_completion,
    json_reply,
)

ACCEPT = "application/vnd.tiny+json"


class TinyHost(RuntimeAdapter):
    """A minimal host adapter: one POST per call, everything shared from the wiring."""

    def __init__(
        self,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        **options: Unpack[WiringOptions],
    ) -> None:
        self._descriptor = AdapterDescriptor(id="tiny-host", version="0.0.1", capabilities=[])
        self.wiring = HostWiring.build(model, langfuse, accept=ACCEPT, path="/tiny", **options)

    @classmethod
    def from_env(cls, env: dict[str, str], **options: Unpack[WiringOptions]) -> TinyHost:
        return cls(ModelConfig.from_env(env), LangfuseConfig.from_env(env), **options)

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def produce_output(self, call: RuntimeCall) -> Produced:
        body = self.wiring.begin(call)
        wiring = self.wiring
        with wiring.settled(self):
            with open_bounded(
                wiring.clients.sync,
                wiring.url,
                content=body.content,
                headers=wiring.headers,
                timeout_s=wiring.model.timeout_s,
            ) as stream:
                content = b"".join(stream.iter_bytes())
                failure = failure_for_status(stream.status, stream.headers, content)
            if failure is not None:
                raise failure
            completion = parse_completion(content)
        return Produced(completion.output, completion)

    def release(self) -> None:
        self.wiring.close()


def model(server: LoopbackModelServer, timeout_s: float = 5.0) -> ModelConfig:
    return ModelConfig(
        base_url=server.base_url, api_key=MODEL_KEY, model="tiny-model", timeout_s=timeout_s
    )


TRACED = LangfuseConfig(
    public_key=f"{PUBLIC_KEY}-tiny",
    secret_key=SECRET_KEY,
    base_url="http://127.0.0.1:9",
    flush_timeout_s=2.0,
)


@pytest.fixture
def hosts() -> Iterator[list[TinyHost]]:
    made: list[TinyHost] = []
    yield made
    for host in made:
        host.close()


def test_a_host_built_on_the_wiring_executes_and_records_its_generation(
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    hosts: list[TinyHost],
) -> None:
    host = TinyHost(model(model_server), TRACED, span_exporter=exporter)
    hosts.append(host)
    receipt = host.execute(greeting_request)
    assert receipt.output == GREETING
    [sent] = model_server.requests
    assert sent.path == "/v1/tiny"
    assert sent.headers["authorization"] == f"Bearer {MODEL_KEY}"
    assert sent.headers["accept"] == ACCEPT
    assert sent.json()["model"] == "tiny-model"
    host.close()  # flushes the adapter-owned export path
    [span] = exporter.get_finished_spans()
    assert metadata(span)["adapter_id"] == "tiny-host"
    assert metadata(span)["request_fingerprint"] == receipt.request_fingerprint


def test_the_wirings_client_bounds_the_whole_round_trip(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest, hosts: list[TinyHost]
) -> None:
    """Headers trickled one byte every 100 ms: every socket read is quick, and only the
    ``DeadlineTransport`` under the wiring's client ends the exchange on time."""
    model_server.set_responder(lambda request: Reply(200, {}, b"{}", trickle_headers_s=0.1))
    host = TinyHost(model(model_server, timeout_s=0.5))
    hosts.append(host)
    started = time.monotonic()
    with pytest.raises(RuntimeFailureError) as raised:
        host.execute(greeting_request)
    assert raised.value.code == codes.RUNTIME_TIMEOUT
    assert time.monotonic() - started < 0.5 + 1.0


def test_the_keys_stay_out_of_logs_and_the_generation(
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
    caplog: pytest.LogCaptureFixture,
    hosts: list[TinyHost],
) -> None:
    """A server echoing the keys: in the status reason (which httpx logs) and in the
    content (the caller's data, verbatim in the receipt; redacted in the generation)."""
    leak = f"{MODEL_KEY} {SECRET_KEY}"
    body = json_reply(chat_completion({"greeting": leak})).body
    model_server.set_responder(lambda request: Reply(200, {}, body, reason=f"Echo {MODEL_KEY}"))
    host = TinyHost(model(model_server), TRACED, span_exporter=exporter)
    hosts.append(host)
    with caplog.at_level(logging.DEBUG, logger="httpx"):
        receipt = host.execute(greeting_request)
    assert receipt.output == {"greeting": leak}
    host.close()
    [span] = exporter.get_finished_spans()
    exported = json.dumps(dict(span.attributes or {}))
    logs = " ".join(record.getMessage() for record in caplog.records)
    for secret in (MODEL_KEY, SECRET_KEY, TRACED.keys()[0]):
        assert secret not in exported
        assert secret not in logs
    assert f"Echo {REDACTED}" in logs
    assert f"{REDACTED} {REDACTED}" in exported


def test_close_releases_what_the_wiring_built_and_leaves_a_hosts_transport_open(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest
) -> None:
    owned = TinyHost(model(model_server))
    host_transport = DeadlineTransport()
    lent = TinyHost(model(model_server), transport=host_transport)
    assert {owned.wiring.redactor, lent.wiring.redactor} <= set(live_redactors())
    owned.execute(greeting_request)
    lent.execute(greeting_request)
    owned.close()
    lent.close()
    assert owned.wiring.clients.sync.is_closed
    assert not {owned.wiring.redactor, lent.wiring.redactor} & set(live_redactors())
    # The host's transport still serves the host.
    with httpx.Client(transport=host_transport) as host_client:
        assert host_client.post(f"{model_server.base_url}/chat/completions", json={}).is_success
    host_transport.close()


@pytest.mark.parametrize(
    "lent",
    [
        {"transport": httpx.HTTPTransport()},
        {"async_transport": httpx.AsyncHTTPTransport()},
        {"transport": AsyncDeadlineTransport()},
    ],
    ids=["httpx sync transport", "httpx async transport", "async transport for sync"],
)
def test_a_transport_that_cannot_keep_the_deadline_is_refused_before_anything_is_installed(
    model_server: LoopbackModelServer, lent: dict[str, Any]
) -> None:
    before = live_redactors()
    with pytest.raises(InvalidData, match="must be a templiqx_langfuse"):
        TinyHost(model(model_server), **lent)
    assert live_redactors() == before


def test_a_build_that_fails_midway_releases_what_it_had_opened(
    model_server: LoopbackModelServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    closed: list[bool] = []

    class Recording(DeadlineTransport):
        def close(self) -> None:
            closed.append(True)
            super().close()

    def failing_tracing(*args: object, **kw: object) -> object:
        raise OSError("exporter unavailable")

    monkeypatch.setattr("templiqx_langfuse._host.DeadlineTransport", Recording)
    monkeypatch.setattr(Tracing, "__init__", failing_tracing)
    before = live_redactors()
    with pytest.raises(OSError, match="exporter unavailable") as raised:
        TinyHost(model(model_server))
    assert closed == [True]
    # Uninstalled, not merely collected: the held traceback still references the filter.
    assert raised.traceback
    assert live_redactors() == before


def test_from_env_reads_both_configurations(
    model_server: LoopbackModelServer, greeting_request: ExecutionRequest
) -> None:
    env = {
        "TEMPLIQX_MODEL_BASE_URL": model_server.base_url,
        "TEMPLIQX_MODEL_API_KEY": MODEL_KEY,
        "TEMPLIQX_MODEL": "tiny-model",
        "LANGFUSE_PUBLIC_KEY": f"{PUBLIC_KEY}-env",
        "LANGFUSE_SECRET_KEY": SECRET_KEY,
    }
    with TinyHost.from_env(env, span_exporter=InMemorySpanExporter()) as host:
        assert host.wiring.tracing.pipeline is not None
        assert host.wiring.redactor.text(f"{SECRET_KEY} {MODEL_KEY}") == f"{REDACTED} {REDACTED}"
        assert host.execute(greeting_request).output == GREETING


class FirstTokenFails(TinyHost):
    """A host whose ``first_token`` probe raises as the call ends (a bug of its own)."""

    def produce_output(self, call: RuntimeCall) -> Produced:
        def first_token() -> None:
            raise LookupError("no first token recorded")

        self.wiring.begin(call, first_token)
        return Produced(GREETING, None)


def test_a_failing_first_token_probe_never_holds_close_up(
    model_server: LoopbackModelServer,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    """The call still leaves the calls in flight: ``close`` has none to wait for."""
    host = FirstTokenFails(model(model_server), TRACED, span_exporter=exporter)
    host.execute(greeting_request)
    started = time.monotonic()
    host.close()
    assert time.monotonic() - started < 1.0


def test_an_option_the_wiring_does_not_take_is_refused_not_ignored() -> None:
    model = ModelConfig(base_url="http://127.0.0.1:9/v1", api_key=MODEL_KEY, model="m")
    with pytest.raises(TypeError, match="langfuse_client"):  # a removed option, still passed
        LangfuseTracedRuntime(model, langfuse_client=object())  # type: ignore[call-arg]
