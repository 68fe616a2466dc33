"""``LangfuseTracedRuntime``: one bounded, failure-mapped round trip per ``execute``.

It deliberately inherits the port's default streaming projection (one ``Complete`` or
one ``Failed``): SSE framing and tool-call assembly are provider wire concerns that
belong to a separate host adapter (ADR "Live-provider boundary").
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import httpx

from templiqx_core import (
    AdapterDescriptor,
    ExecutionRequest,
    RuntimeAdapter,
    RuntimeFailureError,
)
from templiqx_core.adapters import Produced, RuntimeCall

from ._config import LangfuseConfig, ModelConfig
from ._redaction import RedactingLogFilter, Redactor
from ._tracing import PROMPT_CAPABILITY, TracedReceipt, Tracing, collect_traces
from ._transport import build_client, check_host_client, post_bounded
from ._version import __version__
from ._wire import (
    WireFailure,
    build_request_body,
    failure_for_status,
    parse_completion,
)

if TYPE_CHECKING:  # imported at run time only when tracing is on (see ``_tracing``)
    from langfuse import Langfuse
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["ADAPTER_ID", "CAPABILITIES", "LangfuseTracedRuntime"]

ADAPTER_ID = "templiqx-langfuse"
CAPABILITIES = ("structured_output", PROMPT_CAPABILITY)


class LangfuseTracedRuntime(RuntimeAdapter):
    """Executes compiled interactions against an OpenAI-compatible endpoint, traced.

    Thread-safe: one instance (and its pooled ``httpx.Client``) serves concurrent calls.
    Close it (or use it as a context manager) to release connections and flush traces.
    """

    def __init__(
        self,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        *,
        langfuse_client: Langfuse | None = None,
        span_exporter: SpanExporter | None = None,
        http_client: httpx.Client | None = None,
        capabilities: tuple[str, ...] = CAPABILITIES,
    ) -> None:
        self.model = model
        self.langfuse_config = langfuse or LangfuseConfig()
        self.redactor = Redactor(
            [*model.secrets(), self.langfuse_config.public_key, self.langfuse_config.secret_key]
        )
        self._descriptor = AdapterDescriptor(
            id=ADAPTER_ID, version=__version__, capabilities=sorted(set(capabilities))
        )
        self._owns_http = http_client is None
        self._http = (
            build_client(proxy=model.proxy)
            if http_client is None
            else check_host_client(http_client)
        )
        self._log_filter = RedactingLogFilter(self.redactor)  # held weakly by the loggers
        self._log_filter.install()
        self._url = httpx.URL(f"{model.base_url}/chat/completions")  # parsed once, not per call
        self._headers = {
            "authorization": f"Bearer {model.api_key}",
            "content-type": "application/json",
            "accept": "application/json",
        }
        self.tracing = Tracing.build(
            self.langfuse_config, self.redactor, client=langfuse_client, span_exporter=span_exporter
        )

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> LangfuseTracedRuntime:
        """Build from ``TEMPLIQX_*`` / ``OPENAI_*`` / ``LANGFUSE_*`` variables (SPEC §5.1)."""
        environ = os.environ if env is None else env
        return cls(ModelConfig.from_env(environ), LangfuseConfig.from_env(environ), **kwargs)

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def trace_url(self, trace_id: str) -> str | None:
        """A trace URL built locally from the configured project id (no network call)."""
        return self.langfuse_config.trace_url(trace_id)

    def execute_traced(self, request: ExecutionRequest) -> TracedReceipt:
        """``execute``, plus the trace id, generation id and URL of where it landed.

        The receipt is a wire contract and stays unchanged; the ids come alongside it.
        Failures raise exactly as ``execute`` does.
        """
        with collect_traces() as found:
            receipt = self.execute(request)
        ref = found[-1] if found else None
        if ref is None:
            return TracedReceipt(receipt, None, None, None)
        return TracedReceipt(receipt, ref.trace_id, ref.observation_id, ref.url)

    def last_trace_url(self) -> str | None:
        """URL of the trace of the last execution started (one-shot tools such as the CLI)."""
        ref = self.tracing.last_ref
        return ref.url if ref is not None else None

    def produce_output(self, call: RuntimeCall) -> Produced:
        """One bounded POST, traced. The port builds the receipt and maps the unexpected;
        the generation is finished by the port's outcome, whatever it is."""
        interaction = call.request.interaction
        body = build_request_body(interaction, model=self.model.model, strict=self.model.strict)
        record = self.tracing.start(
            interaction,
            model=self.model.model,
            model_parameters=body.model_parameters,
            request_fp=call.request_fingerprint,
            adapter=call.adapter,
            ignored_policy_keys=body.ignored_policy_keys,
        )
        call.on_finish(record.finish)
        try:
            response = post_bounded(
                self._http,
                self._url,
                content=body.content,
                headers=self._headers,
                timeout_s=self.model.timeout_s,
            )
            failure = failure_for_status(response.status, response.headers, response.body)
            if failure is not None:
                raise failure
            completion = parse_completion(response.body)
        except WireFailure as wire:
            raise self._failure(wire) from None
        return Produced(completion.output, completion)

    def _failure(self, wire: WireFailure) -> RuntimeFailureError:
        return wire.to_error(self._descriptor, self.redactor)

    def release(self) -> None:
        """Release pooled connections and flush the adapter-owned Langfuse client (bounded)."""
        try:
            if self._owns_http:
                self._http.close()
            self.tracing.close()
        finally:
            self._log_filter.uninstall()
