"""``StreamingHostRuntime``: OpenAI-compatible chat completions with ``stream: true``.

The host side the ADR's "Live-provider boundary" asks for: ``execute_streaming`` emits
``Delta``/``ToolCallDelta`` events as the provider's Server-Sent Events arrive, then the
same receipt a non-streaming call produces. Everything below the SSE framing is the
Langfuse adapter's own, imported (``templiqx_langfuse.building_blocks``): request bytes,
the bounded transport (one deadline for the whole stream, a size bound on the body),
the failure mapping and the secret rules. ``execute`` runs the same stream and drops the
deltas, so both paths build the receipt from the same assembled message.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Unpack

import orjson

from templiqx_core import (
    AdapterDescriptor,
    DeltaEvent,
    RuntimeAdapter,
    RuntimeFailureCode,
    ToolCallDeltaEvent,
)
from templiqx_core.adapters import Produced, RuntimeCall
from templiqx_langfuse import LangfuseConfig, ModelConfig
from templiqx_langfuse.building_blocks import (
    MAX_RESPONSE_BYTES,
    BoundedStream,
    Completion,
    HostWiring,
    WireFailure,
    WiringOptions,
    failure_for_status,
    open_bounded,
    parse_completion,
)

from ._chunks import ChunkFolder, stream_error
from ._sse import SSEParser

__all__ = ["ADAPTER_ID", "StreamingHostRuntime"]

ADAPTER_ID = "templiqx-streaming-host"
CAPABILITIES = ("structured_output",)
_VERSION = "0.1.0"
_DONE = "[DONE]"

Emit = Callable[[DeltaEvent | ToolCallDeltaEvent], None]


class StreamingHostRuntime(RuntimeAdapter):
    """Streams one chat completion per call. Thread-safe: one pooled client serves all.

    ``max_response_bytes`` bounds the whole event stream (decoded), as the Langfuse
    adapter bounds a body; ``ModelConfig.timeout_s`` is the deadline of the whole stream.
    Cancelling: an exception raised by the sink (or a ``KeyboardInterrupt``) stops the
    read at once and closes the connection; it propagates unchanged.
    """

    def __init__(
        self,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        *,
        capabilities: tuple[str, ...] = CAPABILITIES,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        **options: Unpack[WiringOptions],
    ) -> None:
        self.max_response_bytes = max_response_bytes
        self._descriptor = AdapterDescriptor(
            id=ADAPTER_ID, version=_VERSION, capabilities=sorted(set(capabilities))
        )
        self._wiring = HostWiring.build(model, langfuse, accept="text/event-stream", **options)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **kwargs: Any) -> StreamingHostRuntime:
        """Build from ``TEMPLIQX_*`` / ``OPENAI_*`` / ``LANGFUSE_*``, as the Langfuse adapter."""
        return cls(*HostWiring.configs_from_env(env), **kwargs)

    def descriptor(self) -> AdapterDescriptor:
        return self._descriptor

    def produce_output(self, call: RuntimeCall) -> Produced:
        """One streamed round trip; deltas go out through ``call.emit`` as they arrive.

        The port builds the receipt (the same for ``execute`` and ``execute_streaming``),
        emits the one terminal event and maps anything unexpected.
        """
        wiring = self._wiring
        body, record = wiring.begin(call)
        first_token: list[datetime] = []

        def emit(event: DeltaEvent | ToolCallDeltaEvent) -> None:
            if not first_token:
                first_token.append(datetime.now(UTC))
            call.emit(event)

        call.on_finish(
            lambda outcome: record.finish(
                outcome, first_token_at=first_token[0] if first_token else None
            )
        )
        payload = orjson.loads(body.content)
        payload["stream"] = True
        payload["stream_options"] = {"include_usage": True}
        try:
            with open_bounded(
                wiring.http,
                wiring.url,
                content=orjson.dumps(payload, option=orjson.OPT_SORT_KEYS),
                headers=wiring.headers,
                timeout_s=wiring.model.timeout_s,
                max_bytes=self.max_response_bytes,
            ) as stream:
                completion = _read(stream, emit)
        except WireFailure as wire:
            raise wire.to_error(self._descriptor, wiring.redactor) from None
        return Produced(completion.output, completion)

    def release(self) -> None:
        """Release pooled connections, flush the adapter-owned Langfuse client (bounded)."""
        self._wiring.close()


def _read(stream: BoundedStream, emit: Emit) -> Completion:
    """Read the response as it arrives; return the completion or raise ``WireFailure``."""
    if not 200 <= stream.status < 300:
        failure = failure_for_status(stream.status, stream.headers, b"".join(stream.iter_bytes()))
        assert failure is not None
        raise failure
    media = stream.headers.get("content-type", "").partition(";")[0].strip().lower()
    if media == "application/json":
        return _whole_body(b"".join(stream.iter_bytes()), emit)
    parser, folder, done = SSEParser(), ChunkFolder(), False
    for chunk in stream.iter_bytes():
        for event in parser.feed(chunk):
            if event.data == _DONE:
                done = True
                break
            try:
                data = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                raise WireFailure(
                    RuntimeFailureCode.INVALID_RESPONSE, "stream event data is not JSON"
                ) from None
            if event.event == "error" and not (isinstance(data, dict) and "error" in data):
                raise stream_error(data)
            for out in folder.fold(data):
                emit(out)
        if done:
            break
    if not done and folder.finish_reason is None:
        raise WireFailure(
            RuntimeFailureCode.UNAVAILABLE,
            "model stream ended before it finished (no finish_reason, no [DONE])",
        )
    for out in folder.finish():  # tool calls held back while another one streamed
        emit(out)
    completion = {
        "id": folder.response_id,
        "model": folder.model,
        "choices": [
            {"index": 0, "message": folder.message(), "finish_reason": folder.finish_reason}
        ],
        "usage": folder.usage,
    }
    # The non-streaming rules, applied to the assembled message: same outcome as execute.
    return parse_completion(orjson.dumps(completion))


def _whole_body(body: bytes, emit: Emit) -> Completion:
    """A gateway that ignored ``stream: true``: one delta with the whole content."""
    completion = parse_completion(body)
    message = orjson.loads(body)["choices"][0]["message"]
    if isinstance(message.get("content"), str):
        emit(DeltaEvent(text=message["content"]))
    return completion
