"""``HostWiring``: what a host adapter of an OpenAI-compatible endpoint is wired from.

The Langfuse adapter and every host adapter beside it (the streaming one, another
provider's) need the same pieces built the same way: a redactor that knows every
secret of both configurations, a client that honours the round-trip deadline (a host's
own checked, never half-trusted), the redacting log filter, the endpoint URL and
headers, and the Langfuse tracing. One of them built slightly differently breaks a
guarantee silently (a key missing from the redactor, a client on another transport, a
filter left installed), so they are built here once, and released here once.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import httpx

from templiqx_core.adapters import RuntimeCall

from ._config import LangfuseConfig, ModelConfig
from ._redaction import RedactingLogFilter, Redactor
from ._tracing import GenerationRecord, Tracing
from ._transport import build_client, check_host_client
from ._wire import RequestBody, build_request_body

if TYPE_CHECKING:  # imported at run time only when tracing is on (see ``_tracing``)
    from langfuse import Langfuse
    from opentelemetry.sdk.trace.export import SpanExporter

__all__ = ["HostWiring", "WiringOptions"]


class WiringOptions(TypedDict, total=False):
    """What a host may lend an adapter's wiring. An adapter takes them as
    ``**options: Unpack[WiringOptions]`` and hands them to ``HostWiring.build`` unchanged,
    so every adapter accepts the same ones, typed, and a new one reaches them all."""

    http_client: httpx.Client | None
    langfuse_client: Langfuse | None
    span_exporter: SpanExporter | None


@dataclass(frozen=True, slots=True, eq=False)
class HostWiring:
    """The shared wiring of a host adapter: build it in ``__init__``, ``close`` it in
    ``release``; the adapter keeps only its own wire handling (``produce_output``).

    Thread-safe as its parts are: one wiring (and its pooled client) serves all calls.
    """

    model: ModelConfig
    langfuse: LangfuseConfig
    redactor: Redactor
    http: httpx.Client
    url: httpx.URL
    headers: dict[str, str]
    tracing: Tracing
    owns_http: bool
    log_filter: RedactingLogFilter

    @classmethod
    def build(
        cls,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        *,
        accept: str = "application/json",
        path: str = "/chat/completions",
        http_client: httpx.Client | None = None,
        langfuse_client: Langfuse | None = None,
        span_exporter: SpanExporter | None = None,
    ) -> HostWiring:
        """Wire an adapter for ``model``'s endpoint ``path``, answering in ``accept``.

        ``http_client`` (a host's, on ``DeadlineTransport``) is used and left open by
        ``close``; without one, the adapter's own client is built. If building fails
        midway, whatever was already installed or opened is released again.
        """
        config = langfuse or LangfuseConfig()
        redactor = Redactor([*model.secrets(), config.public_key, config.secret_key])
        owns_http = http_client is None
        http = (
            build_client(proxy=model.proxy)
            if http_client is None
            else check_host_client(http_client)
        )
        log_filter = RedactingLogFilter(redactor)  # held weakly by the loggers
        log_filter.install()
        try:
            tracing = Tracing.build(
                config, redactor, client=langfuse_client, span_exporter=span_exporter
            )
        except BaseException:
            log_filter.uninstall()
            if owns_http:
                http.close()
            raise
        return cls(
            model=model,
            langfuse=config,
            redactor=redactor,
            http=http,
            url=httpx.URL(f"{model.base_url}{path}"),  # parsed once, not per call
            headers={
                "authorization": f"Bearer {model.api_key}",
                "content-type": "application/json",
                "accept": accept,
            },
            tracing=tracing,
            owns_http=owns_http,
            log_filter=log_filter,
        )

    @staticmethod
    def configs_from_env(
        env: Mapping[str, str] | None = None,
    ) -> tuple[ModelConfig, LangfuseConfig]:
        """Both configurations from ``TEMPLIQX_*`` / ``OPENAI_*`` / ``LANGFUSE_*`` (SPEC §5.1),
        for an adapter's ``from_env``: ``cls(*HostWiring.configs_from_env(env), **kwargs)``."""
        environ = os.environ if env is None else env
        return ModelConfig.from_env(environ), LangfuseConfig.from_env(environ)

    def begin(self, call: RuntimeCall) -> tuple[RequestBody, GenerationRecord]:
        """The call's request body (the Langfuse adapter's bytes) and its generation,
        opened; the adapter registers how the generation finishes (``call.on_finish``)."""
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
        return body, record

    def close(self) -> None:
        """Release pooled connections (an adapter-built client only), flush the
        adapter-owned Langfuse export (bounded), then drop the log filter."""
        try:
            if self.owns_http:
                self.http.close()
            self.tracing.close()
        finally:
            self.log_filter.uninstall()
