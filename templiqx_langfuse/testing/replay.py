"""A runtime answered by a cassette (the CLI's ``--replay``, the plugin): no key needed."""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import orjson

from templiqx_core import AdapterDescriptor, ExecutionRequest, InvalidData, RuntimeAdapter
from templiqx_core.adapters import RuntimeCall, RuntimeOptions

from .._config import LangfuseConfig, ModelConfig
from .._runtime import LangfuseTracedRuntime
from .._tracing import TracedReceipt, collect_traces, collect_usage
from .cassettes import (
    LOOPBACK_REPLAY_HOST,
    ActiveCassette,
    cassette_miss,
    no_match_error,
    open_cassette,
)

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export import SpanExporter
    from vcr.cassette import Cassette

__all__ = ["ReplayingRuntime", "cli_replay", "recorded_endpoint", "replaying_runtime"]

logger = logging.getLogger("templiqx_langfuse")


def recorded_endpoint(cassette: Cassette) -> tuple[str, str]:
    """The base URL and model of a loaded cassette's first chat-completions call."""
    request = cassette.requests[0]
    parts = urlsplit(request.uri)
    try:
        model = str(orjson.loads(request.body)["model"])
    except (LookupError, TypeError, ValueError):
        model = ""
    if not (model and parts.path.endswith("/chat/completions")):
        raise InvalidData(f"{cassette.path}: its first interaction is not a chat-completions call")
    return f"{parts.scheme}://{parts.netloc}{parts.path.removesuffix('/chat/completions')}", model


class ReplayingRuntime(RuntimeAdapter):
    """``inner`` on a cassette: a miss is a ``CassetteMiss`` however ``inner`` mapped it."""

    def __init__(
        self,
        active: ActiveCassette | None,
        inner: RuntimeAdapter,
        cassette_stack: contextlib.ExitStack[bool | None],
        *,
        brief_misses: bool = False,
    ) -> None:
        # ``inner``, as a wrapper's: the eval runner finds the traced runtime through it
        self.active, self.inner, self.brief_misses = active, inner, brief_misses
        self._stack = cassette_stack.pop_all()

    def descriptor(self) -> AdapterDescriptor:
        return self.inner.descriptor()

    @contextlib.contextmanager
    def _misses_named(self) -> Iterator[None]:
        try:
            yield
        except Exception as error:
            if self.active is None or (miss := cassette_miss(error)) is None:
                raise
            found = no_match_error(miss, brief=self.brief_misses, scrubber=self.active.scrubber)
            self.active.misses.append(found)
            raise found from None

    def produce_output(self, call: RuntimeCall) -> Any:
        with self._misses_named():
            return self.inner.produce_output(call)

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        with self._misses_named():
            return await self.inner.aproduce_output(call)

    def execute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        with collect_traces() as found, collect_usage() as used:
            return TracedReceipt.of(self.execute(request), found, used)

    async def aexecute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        with collect_traces() as found, collect_usage() as used:
            return TracedReceipt.of(await self.aexecute(request), found, used)

    def release(self) -> None:
        with contextlib.closing(self._stack):  # the cassette saved even if closing fails
            self.inner.close()

    async def arelease(self) -> None:
        with contextlib.closing(self._stack):
            await self.inner.aclose()


def replaying_runtime(
    cassette: str | Path | ActiveCassette | None,
    *,
    record_mode: str = "none",
    secrets: Iterable[str | None] = (),
    ignore_hosts: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    langfuse: LangfuseConfig | None = None,
    span_exporter: SpanExporter | None = None,
    brief_misses: bool = False,
    build: Callable[..., RuntimeAdapter] = LangfuseTracedRuntime,
) -> ReplayingRuntime:
    """The runtime on ``cassette`` (a path, one in use, or ``None``: real calls), its keys
    scrubbed; ``build`` is called as ``LangfuseTracedRuntime`` is."""
    environ = os.environ if env is None else env
    langfuse = langfuse or LangfuseConfig.from_env(environ)
    with contextlib.ExitStack() as stack:
        active = cassette
        if isinstance(active, (str, Path)):
            opened = open_cassette(
                active, record_mode=record_mode, secrets=secrets, env=env, ignore_hosts=ignore_hosts
            )
            active = stack.enter_context(opened)
        ssl_context: ssl.SSLContext | None = None  # it may record: httpx's verifying context
        if active is None or not active.replaying:
            model = ModelConfig.from_env(environ)
        else:
            # Nothing recorded (a test that never called the model records no cassette): any
            # call is a miss saying so, and a test that makes none passes.
            base_url, model_name = (
                recorded_endpoint(active.cassette)
                if len(active.cassette)
                else (f"{LOOPBACK_REPLAY_HOST}/v1", "unrecorded")
            )
            model = ModelConfig(base_url=base_url, api_key="replay-no-key", model=model_name)
            # Nothing connects while replaying (vcrpy answers every call): skip loading the
            # CA store (~20 ms of a ``--replay`` run); trusting nothing, it fails closed.
            ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        if active is not None:
            active.scrubber.add([*langfuse.secrets(), *model.secrets()])
        runtime = build(model, langfuse, span_exporter=span_exporter, ssl_context=ssl_context)
        return ReplayingRuntime(active, runtime, stack, brief_misses=brief_misses)


def cli_replay(
    options: RuntimeOptions, build: Callable[..., RuntimeAdapter] = LangfuseTracedRuntime
) -> ReplayingRuntime:
    """``--replay``: Langfuse off (nothing leaves), a miss on one line unless TEMPLIQX_DEBUG=1."""
    assert options.replay is not None
    langfuse = LangfuseConfig.from_env(options.env)
    if langfuse.enabled:
        logger.warning(
            "replaying %s offline: Langfuse tracing is off (LANGFUSE_* keys ignored)",
            options.replay,
        )
    return replaying_runtime(
        options.replay,
        env=options.env,
        langfuse=langfuse.model_copy(update={"tracing": False}),
        brief_misses=options.env.get("TEMPLIQX_DEBUG") != "1",
        build=build,
    )
