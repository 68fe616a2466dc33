"""A host adapter's parts, built and released in one place (one built apart breaks silently)."""

from __future__ import annotations

import functools
import logging
import os
import ssl
import sys
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import httpx

from templiqx_core import (
    CompiledInteraction,
    InvalidData,
    RuntimeAdapter,
    RuntimeFailureCode,
    Unsupported,
)
from templiqx_core.adapters import CallOutcome, RuntimeCall

from ._config import LangfuseConfig, ModelConfig
from ._deadline import AsyncDeadlineTransport, DeadlineTransport
from ._redaction import Redactor, SecretHeaders, redact_http_logs
from ._tracing import GenerationRecord, TraceRef
from ._wire import RequestBody, WireFailure, build_request_body

if TYPE_CHECKING:  # imported at run time only when tracing is on (see ``_tracing``)
    import asyncio

    from opentelemetry.sdk.trace.export import SpanExporter

    from ._export import ExportPipeline

logger = logging.getLogger("templiqx_langfuse")
#: How long ``close`` waits for calls in flight, their I/O aborted, to end.
CLOSE_WAIT_S = 2.0


class WiringOptions(TypedDict, total=False):
    """What a host may lend an adapter's wiring (handed on to ``HostWiring.build``)."""

    transport: DeadlineTransport | None
    async_transport: AsyncDeadlineTransport | None
    ssl_context: ssl.SSLContext | None
    span_exporter: SpanExporter | None


@functools.cache
def default_ssl_context() -> ssl.SSLContext:
    """httpx's verifying TLS context, loaded once per process (the CA store costs ~30 ms)."""
    return httpx.create_ssl_context()


class Tracing:
    """Executions as Langfuse generations; a failure is logged once, never the caller's."""

    def __init__(
        self, config: LangfuseConfig, redactor: Redactor, span_exporter: SpanExporter | None
    ) -> None:
        self.config, self.redactor = config, redactor
        self.pipeline: ExportPipeline | None = None
        # OTel's TracerProvider reads it too and would record nothing, silently.
        otel_off = os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true"
        if config.tracing and (otel_off or not config.enabled):  # off on purpose: no warning
            why = "OTEL_SDK_DISABLED=true" if otel_off else "a LANGFUSE_*_KEY unset"
            logger.warning("Langfuse tracing disabled (%s); executions still run", why)
        elif config.tracing:  # langfuse and OpenTelemetry are imported now, not mid-call
            from ._export import ExportPipeline

            self.pipeline = ExportPipeline(config, span_exporter=span_exporter)
        self._error_logged = threading.Event()
        #: Told where each traced execution lands as it starts (a surface's ``on_trace_url``).
        self.on_ref: Callable[[TraceRef], None] | None = None
        # Calls between ``start`` and ``finish``: ``close`` waits for them.
        self._in_flight = 0
        self._idle = threading.Condition(threading.Lock())
        _TRACINGS.add(self)

    def report_error(self, what: str, error: BaseException) -> None:
        if not self._error_logged.is_set():
            self._error_logged.set()
            logger.warning("Langfuse tracing: %s failed (%s)", what, type(error).__name__)

    def start(self, call: RuntimeCall, body: RequestBody, model: str) -> GenerationRecord:
        """The call's generation (untraced: usage only), in flight until ``finish``."""
        record = None
        if self.pipeline is not None:
            from ._export import open_generation  # loaded with the pipeline

            try:
                record = open_generation(self, call, body, model)
            except Exception as error:
                self.report_error("starting a generation", error)
        with self._idle:
            self._in_flight += 1
        return record or GenerationRecord()

    def finish(
        self,
        record: GenerationRecord,
        outcome: CallOutcome,
        first_token: Callable[[], datetime | None],
    ) -> None:
        try:  # a host's ``first_token`` may raise: the call still leaves the calls in flight
            record.finish(outcome, first_token_at=first_token())
        finally:
            with self._idle:
                self._in_flight -= 1
                if not self._in_flight:
                    self._idle.notify_all()

    def input_json(self, interaction: CompiledInteraction) -> str | None:
        """The messages as redacted JSON (masked first: None if the mask raised)."""
        messages: Any = [{"role": m.role, "content": m.content} for m in interaction.messages]
        if self.config.mask is not None:
            messages = self.masked("input", messages)
        return None if messages is None else self.redactor.json_text(messages)

    def masked(self, field: str, data: Any) -> Any:
        """None (the field is dropped) if the mask raises."""
        try:
            return self.config.mask(data=data) if self.config.mask is not None else data
        except Exception as error:  # a host's mask must never fail the call
            self.report_error(f"masking a generation's {field}", error)
            return None

    def close(self) -> None:
        """Wait (bounded, never on a loop's thread) for calls in flight, then flush."""
        try:
            asyncio = sys.modules.get("asyncio")  # never imported for this alone
            waits = asyncio is None or not asyncio.get_running_loop()
        except RuntimeError:
            waits = True
        with self._idle:
            self._idle.wait_for(lambda: not self._in_flight, CLOSE_WAIT_S if waits else 0)
        pipeline, self.pipeline = self.pipeline, None
        if pipeline is not None:
            try:
                pipeline.close()
            except Exception as error:
                self.report_error("flushing", error)


_TRACINGS: weakref.WeakSet[Tracing] = weakref.WeakSet()


def _forked() -> None:
    """A forked child has none of its parent's calls in flight (nor their lock held)."""
    for tracing in list(_TRACINGS):
        tracing._in_flight, tracing._idle = 0, threading.Condition(threading.Lock())


os.register_at_fork(after_in_child=_forked)


class Clients:
    """Deadline-bound clients, one per event loop, through the ``MockTransport`` vcrpy patches."""

    def __init__(self, model: ModelConfig, **options: Unpack[WiringOptions]) -> None:
        transport, async_transport = options.get("transport"), options.get("async_transport")
        for lent, kind in (
            (transport, DeadlineTransport),
            (async_transport, AsyncDeadlineTransport),
        ):
            if lent is not None and not isinstance(lent, kind):  # others lose the deadline
                raise InvalidData(f"a lent transport must be a templiqx_langfuse.{kind.__name__}")
        most = model.max_connections  # keep-alive as AsyncOpenAI's
        self._options: dict[str, Any] = {
            "verify": options.get("ssl_context") or default_ssl_context(),
            "limits": httpx.Limits(max_connections=most, max_keepalive_connections=min(most, 100)),
            "proxy": model.proxy and model.proxy.get_secret_value(),
        }
        self._lent_async = async_transport
        self._owned = [] if transport else [DeadlineTransport(**self._options)]
        via = httpx.MockTransport((transport or self._owned[0]).handle_request)
        # No environment: a proxy from ``HTTPS_PROXY`` would see every call (or the key).
        self.sync = httpx.Client(transport=via, follow_redirects=False, trust_env=False)
        # Not weak (a pool references its loop): closed loops' are dropped as new ones come.
        self._async: dict[
            asyncio.AbstractEventLoop, tuple[httpx.AsyncClient, AsyncDeadlineTransport]
        ] = {}
        self._lock = threading.Lock()

    def for_loop(self) -> httpx.AsyncClient:
        """The running event loop's client (built on first use there)."""
        import asyncio

        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # trio, curio: httpx's asyncio pool cannot serve them
            raise Unsupported("aexecute needs asyncio: from trio, execute on a thread") from None
        entry = self._async.get(loop)
        if entry is None:
            with self._lock:
                for closed in [other for other in self._async if other.is_closed()]:
                    del self._async[closed]
                entry = self._async.get(loop)
                if entry is None:
                    transport = self._lent_async or AsyncDeadlineTransport(**self._options)
                    via = httpx.MockTransport(transport.handle_async_request)
                    client = httpx.AsyncClient(
                        transport=via, follow_redirects=False, trust_env=False
                    )
                    entry = self._async[loop] = (client, transport)
        return entry[0]

    def close(self, here: asyncio.AbstractEventLoop | None = None) -> list[AsyncDeadlineTransport]:
        """Close all but lent transports, each on its loop; those of ``here`` are returned."""
        with self._lock:
            taken = [(loop, t) for loop, (_, t) in self._async.items() if t is not self._lent_async]
            self._async.clear()
        self.sync.close()  # later calls fail fast
        for owned in self._owned:
            owned.close()
        for loop, transport in taken:
            if loop is not here:
                _close_elsewhere(loop, transport)
        return [transport for loop, transport in taken if loop is here]


_CLOSING: set[Any] = set()  # tasks closing a pool on its loop, kept until they finish


def _close_elsewhere(loop: asyncio.AbstractEventLoop, transport: AsyncDeadlineTransport) -> None:
    import asyncio

    transport.closed = True  # at once: a call resuming on a paused loop sends and reads nothing
    if loop.is_closed() or not loop.is_running():
        return
    pending = asyncio.run_coroutine_threadsafe(transport.aclose(), loop)  # from its own too
    _CLOSING.add(pending)
    pending.add_done_callback(_CLOSING.discard)


@dataclass(frozen=True, slots=True, eq=False)
class HostWiring:
    """A host adapter's wiring: built in its ``__init__``, closed in its ``release``."""

    model: ModelConfig
    langfuse: LangfuseConfig
    redactor: Redactor
    clients: Clients
    url: httpx.URL
    headers: SecretHeaders = field(repr=False)  # carries the key
    tracing: Tracing

    @classmethod
    def build(
        cls,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        *,
        accept: str = "application/json",
        path: str = "/chat/completions",
        **options: Unpack[WiringOptions],
    ) -> HostWiring:
        """Wire an adapter for ``model``'s endpoint ``path`` (released if it fails midway)."""
        if unknown := sorted(options.keys() - WiringOptions.__optional_keys__):
            raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
        config = langfuse or LangfuseConfig()
        redactor = Redactor([*model.secrets(), *config.secrets()])
        clients = Clients(model, **options)
        redact_http_logs(redactor)
        try:
            tracing = Tracing(config, redactor, options.get("span_exporter"))
        except BaseException:
            redact_http_logs(redactor, on=False)
            clients.close()
            raise
        return cls(
            model=model,
            langfuse=config,
            redactor=redactor,
            clients=clients,
            url=httpx.URL(f"{model.base_url}{path}"),  # parsed once, not per call
            headers=SecretHeaders(
                {
                    "authorization": f"Bearer {model.api_key.get_secret_value()}",
                    "content-type": "application/json",
                    "accept": accept,
                }
            ),
            tracing=tracing,
        )

    def begin(
        self, call: RuntimeCall, first_token: Callable[[], datetime | None] = lambda: None
    ) -> RequestBody:
        """The call's request body; its generation opens (``first_token``: when streamed)."""
        model, strict = self.model.model, self.model.strict
        body = build_request_body(call.request.interaction, model=model, strict=strict)
        record, tracing = self.tracing.start(call, body, model), self.tracing
        call.on_finish(lambda outcome: tracing.finish(record, outcome, first_token))
        return body

    @contextmanager
    def settled(self, runtime: RuntimeAdapter) -> Iterator[None]:
        """A ``WireFailure``, or a call done once ``runtime`` began closing, as its failure."""
        try:
            yield
            if runtime.closed:
                raise WireFailure(RuntimeFailureCode.UNAVAILABLE, "the runtime closed mid-call")
        except WireFailure as failure:
            raise failure.to_error(runtime.descriptor(), self.redactor) from None

    def close(self) -> None:
        """Release the pools, then close the tracing (its calls in flight end first)."""
        try:
            self.clients.close()
            self.tracing.close()
        finally:
            redact_http_logs(self.redactor, on=False)

    async def aclose(self) -> None:
        """``close`` from the event loop: its pools awaited, the waits on a thread."""
        import asyncio

        try:
            here = asyncio.get_running_loop()
        except RuntimeError:  # trio & co: no asyncio pool can be open; close as sync code
            return self.close()
        try:
            for transport in self.clients.close(here):
                await transport.aclose()
        finally:
            await asyncio.to_thread(self.close)
