"""``LangfuseTracedRuntime`` (or a runtime built like it) answered by a cassette, for the
CLI's ``--replay`` and the plugin: replaying, the endpoint and model come from the
cassette and no key is needed; recording, the model is configured from the environment."""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack
from urllib.parse import urlsplit

import orjson
from vcr.record_mode import RecordMode

from templiqx_core import AdapterDescriptor, ExecutionRequest, InvalidData, RuntimeAdapter
from templiqx_core.adapters import RuntimeCall, load_document

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

__all__ = [
    "ReplayingRuntime",
    "offline_langfuse",
    "recorded_endpoint",
    "replaying_runtime",
    "runtime_on",
]

logger = logging.getLogger("templiqx_langfuse")


def offline_langfuse(config: LangfuseConfig, cassette: Path) -> LangfuseConfig:
    """``config`` with tracing off: a replay sends nothing anywhere (set keys still redacted)."""
    if config.enabled:
        logger.warning(
            "replaying %s offline: Langfuse tracing is off (LANGFUSE_* keys ignored)", cassette
        )
    return config.model_copy(update={"tracing": False})


def recorded_endpoint(path: Path) -> tuple[str, str]:
    """The base URL and model of a cassette's first chat-completions interaction."""
    data = load_document(path)  # aliases bounded; a file that does not load names why
    try:
        request = data["interactions"][0]["request"]
        uri, body = request["uri"], request["body"]
        model = orjson.loads(body.encode() if isinstance(body, str) else body)["model"]
    except (LookupError, TypeError, ValueError):
        raise InvalidData(f"{path} is not a cassette of chat-completions calls") from None
    parts = urlsplit(uri)
    if not parts.path.endswith("/chat/completions"):
        raise InvalidData(f"{path}: first interaction is not a chat-completions call")
    base = f"{parts.scheme}://{parts.netloc}{parts.path[: -len('/chat/completions')]}"
    return base, str(model)


class ReplayingRuntime(RuntimeAdapter):
    """``runtime``'s calls answered (or recorded) by a cassette; a miss is a ``CassetteMiss``
    whatever ``runtime`` mapped it into. Closing flushes the traces, then saves the cassette."""

    def __init__(
        self,
        active: ActiveCassette | None,
        runtime: RuntimeAdapter,
        cassette_stack: contextlib.ExitStack[bool | None],
        *,
        brief_misses: bool = False,
    ) -> None:
        self.active, self.runtime, self.brief_misses = active, runtime, brief_misses
        self.inner = runtime  # named as a wrapper's is: the eval runner finds its redactor there
        self._stack = cassette_stack.pop_all()

    def descriptor(self) -> AdapterDescriptor:
        return self.runtime.descriptor()

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
            return self.runtime.produce_output(call)

    async def aproduce_output(self, call: RuntimeCall) -> Any:
        with self._misses_named():
            return await self.runtime.aproduce_output(call)

    def execute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        with collect_traces() as found, collect_usage() as used:
            return TracedReceipt.of(self.execute(request), found, used)

    async def aexecute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        with collect_traces() as found, collect_usage() as used:
            return TracedReceipt.of(await self.aexecute(request), found, used)

    def release(self) -> None:
        with contextlib.closing(self._stack):  # the cassette saved even if closing fails
            self.runtime.close()

    async def arelease(self) -> None:
        with contextlib.closing(self._stack):
            await self.runtime.aclose()


class _Options(TypedDict, total=False):
    env: Mapping[str, str] | None
    langfuse: LangfuseConfig | None
    span_exporter: SpanExporter | None
    brief_misses: bool
    build: Callable[..., RuntimeAdapter]


def replaying_runtime(
    cassette: str | Path,
    *,
    record_mode: str | RecordMode = "none",
    secrets: Iterable[str | None] = (),
    ignore_hosts: Iterable[str] = (),
    **options: Unpack[_Options],
) -> ReplayingRuntime:
    """The runtime on ``cassette``; ``ignore_hosts`` pass through (an ASGI app under test)."""
    env = options.get("env")
    with contextlib.ExitStack() as stack:
        opened = open_cassette(
            cassette, record_mode=record_mode, secrets=secrets, env=env, ignore_hosts=ignore_hosts
        )
        return runtime_on(stack.enter_context(opened), stack, **options)


def runtime_on(
    active: ActiveCassette | None,
    stack: contextlib.ExitStack[bool | None],
    *,
    env: Mapping[str, str] | None = None,
    langfuse: LangfuseConfig | None = None,
    span_exporter: SpanExporter | None = None,
    brief_misses: bool = False,
    build: Callable[..., RuntimeAdapter] = LangfuseTracedRuntime,
) -> ReplayingRuntime:
    """The runtime on a cassette in use (``None``: real calls), taking over ``stack``;
    ``build`` is called as ``LangfuseTracedRuntime`` is, and every key it gets is scrubbed."""
    environ = os.environ if env is None else env
    langfuse = langfuse or LangfuseConfig.from_env(environ)
    ssl_context: ssl.SSLContext | None = None  # it may record: httpx's verifying context
    if active is None or not active.replaying:
        model = ModelConfig.from_env(environ)
    else:
        # No cassette yet (a test that never called the model records none): any call is
        # a miss saying so, and a test that makes none passes.
        base_url, model_name = (
            recorded_endpoint(active.path)
            if active.path.is_file()
            else (f"{LOOPBACK_REPLAY_HOST}/v1", "unrecorded")
        )
        model = ModelConfig(base_url=base_url, api_key="replay-no-key", model=model_name)
        # Nothing connects while replaying: skip loading the CA store (~20 ms of a
        # ``--replay`` run); trusting no certificate, a connection would fail closed.
        ssl_context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if active is not None:
        active.scrubber.add([*langfuse.secrets(), *model.secrets()])
    runtime = build(model, langfuse, span_exporter=span_exporter, ssl_context=ssl_context)
    return ReplayingRuntime(active, runtime, stack, brief_misses=brief_misses)
