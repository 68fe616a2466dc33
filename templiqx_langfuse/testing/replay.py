"""``LangfuseTracedRuntime`` answered by a cassette: the CLI's ``--replay`` and the plugin.

``replaying_runtime`` is the one place that builds it, for both. While it replays, the
endpoint and model come from the cassette and no key is needed; when the record mode
lets it record (a missing cassette under ``once``, ``new_episodes``, ``all``,
``rewrite``) the model endpoint is configured from the environment as usual.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import orjson
import yaml
from vcr.record_mode import RecordMode

from templiqx_core import ExecutionReceipt, ExecutionRequest, InvalidData
from templiqx_core._loading import compose_and_load
from templiqx_core.adapters import WrappingRuntime

from .._config import LangfuseConfig, ModelConfig
from .._runtime import LangfuseTracedRuntime
from .._tracing import TracedReceipt, collect_traces
from .cassettes import ActiveCassette, CassetteMiss, cassette_miss, no_match_error, open_cassette

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = [
    "ReplayingRuntime",
    "live_runtime",
    "offline_langfuse",
    "recorded_endpoint",
    "replaying_runtime",
    "runtime_on",
]

_REPLAY_KEY = "replay-no-key"
logger = logging.getLogger("templiqx_langfuse")


def offline_langfuse(config: LangfuseConfig, cassette: Path) -> LangfuseConfig:
    """``config`` with tracing off, for a command-line replay (``--replay``): a replay is
    the offline job, so it sends nothing anywhere, Langfuse included. Keys that were set
    are still redacted; that they are ignored is said once."""
    if config.enabled:
        logger.warning(
            "replaying %s offline: Langfuse tracing is off (LANGFUSE_* keys ignored)", cassette
        )
    return dataclasses.replace(config, tracing=False)


def recorded_endpoint(path: Path) -> tuple[str, str]:
    """The base URL and model of a cassette's first chat-completions interaction."""
    try:
        data = compose_and_load(path.read_text(encoding="utf-8"))[1]  # aliases bounded
        request = data["interactions"][0]["request"]
        uri, body = request["uri"], request["body"]
        model = orjson.loads(body.encode() if isinstance(body, str) else body)["model"]
    except (OSError, UnicodeDecodeError, RecursionError, yaml.YAMLError, LookupError, TypeError):
        raise InvalidData(f"{path} is not a cassette of chat-completions calls") from None
    parts = urlsplit(uri)
    if not parts.path.endswith("/chat/completions"):
        raise InvalidData(f"{path}: first interaction is not a chat-completions call")
    base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len('/chat/completions')]}"
    return base, str(model)


def _trust_nothing() -> ssl.SSLContext:
    """The TLS context while a cassette only replays: vcrpy answers every request and the
    offline guard blocks sockets, so nothing connects, and loading the CA store (~20 ms of
    the CLI's ~0.4 s ``--replay`` run) would buy nothing. It trusts no certificate: a
    connection, were one ever attempted, would fail closed."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class ReplayingRuntime(WrappingRuntime):
    """A ``LangfuseTracedRuntime`` whose HTTP calls are answered (or recorded) by a cassette.

    A request the cassette cannot answer raises ``CassetteMiss`` (``TQX_NOT_FOUND``)
    naming the cassette and what the closest recording differs in — with the body diff
    (a test report's place for it), or on one line when ``brief_misses`` (the CLI's).
    """

    def __init__(
        self,
        active: ActiveCassette | None,
        runtime: LangfuseTracedRuntime,
        cassette_stack: contextlib.ExitStack[bool | None],
        *,
        brief_misses: bool = False,
    ) -> None:
        super().__init__(runtime)
        self.active = active
        self.runtime = runtime
        self.brief_misses = brief_misses
        self._stack = cassette_stack

    @property
    def cassette(self) -> Path | None:
        """The cassette's path; ``None`` when recording is disabled (real calls)."""
        return None if self.active is None else self.active.path

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        try:
            return self.runtime.execute(request)
        except Exception as error:
            miss = self._miss(error)
            if miss is None:
                raise
            raise miss from None

    async def aexecute(self, request: ExecutionRequest) -> ExecutionReceipt:
        self._ensure_open()
        try:
            return await self.runtime.aexecute(request)
        except Exception as error:
            miss = self._miss(error)
            if miss is None:
                raise
            raise miss from None

    def _miss(self, error: Exception) -> CassetteMiss | None:
        """The runtime maps the unexpected into a failure; a replay miss stays the cause."""
        miss = cassette_miss(error) if self.active is not None else None
        if miss is None or self.active is None:
            return None
        return no_match_error(miss, brief=self.brief_misses, scrubber=self.active.scrubber)

    def execute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        """``LangfuseTracedRuntime.execute_traced``, answered by the cassette."""
        with collect_traces() as found:
            receipt = self.execute(request)
        return TracedReceipt.of(receipt, found)

    async def aexecute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        with collect_traces() as found:
            receipt = await self.aexecute(request)
        return TracedReceipt.of(receipt, found)

    def trace_url(self, trace_id: str) -> str | None:
        return self.runtime.trace_url(trace_id)

    def last_trace_url(self) -> str | None:
        return self.runtime.last_trace_url()

    def release(self) -> None:
        """Close the runtime (flushing its traces), then put the cassette away (saving it)."""
        try:
            self.runtime.close()
        finally:
            self._stack.close()

    async def arelease(self) -> None:
        try:
            await self.runtime.aclose()
        finally:
            self._stack.close()


def live_runtime(
    *,
    env: Mapping[str, str] | None = None,
    langfuse: LangfuseConfig | None = None,
    span_exporter: SpanExporter | None = None,
) -> ReplayingRuntime:
    """The same runtime with no cassette at all (pytest-recording's ``--disable-recording``):
    every call is real, configured from the environment, and nothing is written."""
    environ = os.environ if env is None else env
    runtime = LangfuseTracedRuntime(
        ModelConfig.from_env(environ),
        langfuse or LangfuseConfig.from_env(environ),
        span_exporter=span_exporter,
    )
    return ReplayingRuntime(None, runtime, contextlib.ExitStack())


def replaying_runtime(
    cassette: str | Path,
    *,
    env: Mapping[str, str] | None = None,
    record_mode: str | RecordMode = "none",
    secrets: Iterable[str | None] = (),
    langfuse: LangfuseConfig | None = None,
    span_exporter: SpanExporter | None = None,
    brief_misses: bool = False,
    ignore_hosts: Iterable[str] = (),
) -> ReplayingRuntime:
    """Build the runtime on ``cassette``, opened with ``record_mode`` (the CLI's ``--replay``).

    Langfuse follows ``langfuse`` or the environment (it is never recorded; while the
    cassette replays only a loopback Langfuse is reachable). ``brief_misses``: a miss is
    described on one line. ``ignore_hosts``: vcrpy's, for calls the cassette must neither
    record nor answer (an ASGI app under test).
    """
    environ = os.environ if env is None else env
    stack = contextlib.ExitStack()
    try:
        active = stack.enter_context(
            open_cassette(
                cassette,
                record_mode=record_mode,
                secrets=secrets,
                env=environ,
                ignore_hosts=ignore_hosts,
            )
        )
        return runtime_on(
            active,
            stack,
            env=environ,
            langfuse=langfuse,
            span_exporter=span_exporter,
            brief_misses=brief_misses,
        )
    except BaseException:
        stack.close()
        raise


def runtime_on(
    active: ActiveCassette,
    stack: contextlib.ExitStack[bool | None],
    *,
    env: Mapping[str, str] | None = None,
    langfuse: LangfuseConfig | None = None,
    span_exporter: SpanExporter | None = None,
    brief_misses: bool = False,
) -> ReplayingRuntime:
    """The runtime on a cassette already in use (the CLI's, or pytest-recording's in a test);
    ``stack`` closes it. Replaying: endpoint and model read from the cassette, no key
    needed; recording: configured from the environment. Every configured key is scrubbed
    from what gets recorded."""
    environ = os.environ if env is None else env
    langfuse = langfuse or LangfuseConfig.from_env(environ)
    active.scrubber.add([langfuse.public_key, langfuse.secret_key])
    if active.replaying:
        base_url, model_name = recorded_endpoint(active.path)
        model = ModelConfig(base_url=base_url, api_key=_REPLAY_KEY, model=model_name)
        ssl_context: ssl.SSLContext | None = _trust_nothing()
    else:
        model = ModelConfig.from_env(environ)
        active.scrubber.add([model.api_key])
        ssl_context = None  # it may record: httpx's verifying context
    runtime = LangfuseTracedRuntime(
        model, langfuse, span_exporter=span_exporter, ssl_context=ssl_context
    )
    return ReplayingRuntime(active, runtime, stack, brief_misses=brief_misses)
