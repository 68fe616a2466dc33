"""``LangfuseTracedRuntime``: one bounded, failure-mapped round trip per ``execute``.

It deliberately inherits the port's default streaming projection (one ``Complete`` or
one ``Failed``): SSE framing and tool-call assembly are provider wire concerns that
belong to a separate host adapter (ADR "Live-provider boundary").
"""

from __future__ import annotations

import os
import types
from collections.abc import Mapping
from typing import Any

import httpx
from langfuse import Langfuse
from opentelemetry.sdk.trace.export import SpanExporter

from templiqx_core import (
    AdapterDescriptor,
    ExecutionReceipt,
    ExecutionRequest,
    RuntimeAdapter,
    RuntimeFailure,
    RuntimeFailureError,
    build_receipt,
    compile_schema,
    request_fingerprint,
)

from ._config import LangfuseConfig, ModelConfig
from ._deadline import DeadlineTransport
from ._redaction import RedactingLogFilter, Redactor
from ._tracing import Tracing
from ._transport import post_bounded
from ._version import __version__
from ._wire import WireFailure, build_request_body, failure_for_status, parse_completion

__all__ = ["ADAPTER_ID", "CAPABILITIES", "LangfuseTracedRuntime"]

ADAPTER_ID = "templiqx-langfuse"
CAPABILITIES = ("structured_output",)


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
            [model.api_key, self.langfuse_config.public_key, self.langfuse_config.secret_key]
        )
        self._log_filter = RedactingLogFilter(self.redactor)
        self._log_filter.install()
        self._descriptor = AdapterDescriptor(
            id=ADAPTER_ID, version=__version__, capabilities=sorted(set(capabilities))
        )
        self._owns_http = http_client is None
        self._http = http_client or httpx.Client(
            transport=DeadlineTransport(
                limits=httpx.Limits(max_connections=64, max_keepalive_connections=32)
            ),
            follow_redirects=False,
        )
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

    def execute(self, request: ExecutionRequest) -> ExecutionReceipt:
        interaction = request.interaction
        # Refuse an invalid output schema before any network I/O.
        validator = compile_schema(interaction.output_schema)
        body = build_request_body(interaction, model=self.model.model, strict=self.model.strict)
        request_fp = request_fingerprint(interaction)
        descriptor = self._descriptor
        record = self.tracing.start(
            interaction,
            model=self.model.model,
            model_parameters=body.model_parameters,
            request_fp=request_fp,
            adapter=descriptor,
            ignored_policy_keys=body.ignored_policy_keys,
        )
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
            error = self._failure(wire)
            record.fail(code=error.code, detail=error.failure.detail)
            raise error from None
        except BaseException as unexpected:
            # Not a mapped failure (a bug, a cancelled thread, a replay miss): close the
            # generation without the exception text, which may carry request data.
            record.fail(code=type(unexpected).__name__, detail="unexpected error")
            raise
        receipt = build_receipt(
            descriptor, interaction, completion.output, request_fp=request_fp, validator=validator
        )
        record.succeed(receipt, completion)
        return receipt

    def _failure(self, wire: WireFailure) -> RuntimeFailureError:
        failure = RuntimeFailure.for_adapter(
            self._descriptor,
            wire.code,
            self.redactor.text(wire.detail),
            retry_after_ms=wire.retry_after_ms,
        )
        return RuntimeFailureError(failure)

    def close(self) -> None:
        """Release pooled connections and flush the adapter-owned Langfuse client (bounded)."""
        if self._owns_http:
            self._http.close()
        self.tracing.close()
        self._log_filter.uninstall()

    def __enter__(self) -> LangfuseTracedRuntime:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: types.TracebackType | None,
    ) -> None:
        self.close()
