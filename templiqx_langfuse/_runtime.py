"""``LangfuseTracedRuntime``: one bounded, failure-mapped round trip per ``execute`` (streaming
keeps the port's default projection: SSE is ``templiqx_streaming_host``'s)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Unpack

from templiqx_core import AdapterDescriptor, ExecutionRequest, RuntimeAdapter
from templiqx_core.adapters import Produced, RuntimeCall

from ._config import LangfuseConfig, ModelConfig
from ._deadline import BoundedStream, Post, aopen_bounded, open_bounded
from ._host import HostWiring, WiringOptions
from ._tracing import PROMPT_CAPABILITY, TracedReceipt, collect_traces, collect_usage
from ._version import __version__

ADAPTER_ID = "templiqx-langfuse"
CAPABILITIES = ("structured_output", PROMPT_CAPABILITY)


class LangfuseTracedRuntime(RuntimeAdapter):
    """Executes compiled interactions against an OpenAI-compatible endpoint, traced. One
    instance serves threads (``execute``) and tasks (``aexecute``, natively async: a pool
    per event loop); close it to release connections and flush traces."""

    def __init__(
        self,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        *,
        capabilities: tuple[str, ...] = CAPABILITIES,
        **options: Unpack[WiringOptions],
    ) -> None:
        self._descriptor = AdapterDescriptor(
            id=ADAPTER_ID, version=__version__, capabilities=sorted(set(capabilities))
        )
        self._wiring = wiring = HostWiring.build(model, langfuse, **options)
        self.model, self.langfuse_config = wiring.model, wiring.langfuse
        self.redactor, self.tracing = wiring.redactor, wiring.tracing

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> LangfuseTracedRuntime:
        """Build from ``TEMPLIQX_*`` / ``OPENAI_*`` / ``LANGFUSE_*`` variables."""
        environ = os.environ if env is None else env
        return cls(ModelConfig.from_env(environ), LangfuseConfig.from_env(environ), **kwargs)

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def trace_url(self, trace_id: str) -> str | None:
        """A trace URL built locally from the configured project id (no network call)."""
        return self.langfuse_config.trace_url(trace_id)

    def execute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        """``execute``, plus the trace id, generation id and URL of where it landed, beside
        the (unchanged) receipt; failures raise exactly as ``execute`` does."""
        with collect_traces() as found, collect_usage() as used:
            receipt = self.execute(request)
        return TracedReceipt.of(receipt, found, used)

    async def aexecute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        """``execute_traced`` for async hosts (this task's trace, whatever else runs)."""
        with collect_traces() as found, collect_usage() as used:
            receipt = await self.aexecute(request)
        return TracedReceipt.of(receipt, found, used)

    def produce_output(self, call: RuntimeCall) -> Produced:
        """One bounded POST, traced; the port builds the receipt and finishes the generation."""
        wiring = self._wiring
        with wiring.settled(self):
            with open_bounded(wiring.clients.sync, wiring.url, **self._begin(call)) as stream:
                body = stream.body()
            return _produced(stream, body)  # parsed once the connection is back

    async def aproduce_output(self, call: RuntimeCall) -> Produced:
        wiring = self._wiring
        with wiring.settled(self):
            client = wiring.clients.for_loop()
            async with aopen_bounded(client, wiring.url, **self._begin(call)) as stream:
                body = await stream.abody()
            return _produced(stream, body)

    def _begin(self, call: RuntimeCall) -> Post:
        content, headers = self._wiring.begin(call).content, self._wiring.headers
        return Post(content=content, headers=headers, timeout_s=self.model.timeout_s)

    def release(self) -> None:
        """Release pooled connections and flush the adapter-owned export (bounded)."""
        self._wiring.close()

    async def arelease(self) -> None:
        await self._wiring.aclose()


def _produced(stream: BoundedStream, body: bytes) -> Produced:
    completion = stream.settle(body)
    return Produced(completion.output, completion, deadline_at=stream.at)
