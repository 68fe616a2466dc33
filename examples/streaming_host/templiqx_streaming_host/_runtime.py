"""``StreamingHostRuntime``: OpenAI-compatible chat completions with ``stream: true``.

The streaming side the Langfuse adapter leaves out on purpose: ``execute_streaming`` emits
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
    Completion,
    HostWiring,
    WireFailure,
    WiringOptions,
    aopen_bounded,
    deadline_at,
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

    def _prepare(self, call: RuntimeCall) -> tuple[bytes, Emit]:
        """The streaming request bytes, and the emitter that also notes the first token
        (the generation's ``completion_start_time``, on success and failure alike)."""
        body, record = self._wiring.begin(call)
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
        return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS), emit

    def _deadline(self) -> float:
        return deadline_at(self._wiring.model.timeout_s)

    def produce_output(self, call: RuntimeCall) -> Produced:
        """One streamed round trip; deltas go out through ``call.emit`` as they arrive.

        The port builds the receipt (the same for ``execute`` and ``execute_streaming``),
        emits the one terminal event and maps anything unexpected.
        """
        content, emit = self._prepare(call)
        wiring, at = self._wiring, self._deadline()
        try:
            with open_bounded(
                wiring.http,
                wiring.url,
                content=content,
                headers=wiring.headers,
                timeout_s=wiring.model.timeout_s,
                max_bytes=self.max_response_bytes,
            ) as stream:
                reader = _Reader(stream.status, stream.headers, emit)
                if reader.whole:
                    completion = reader.whole_body(stream.body().body)
                else:
                    for chunk in stream.iter_bytes():
                        if reader.feed(chunk):
                            break
                    completion = reader.completion()
        except WireFailure as wire:
            raise wire.to_error(self._descriptor, wiring.redactor) from None
        return Produced(completion.output, completion, deadline_at=at)

    async def aproduce_output(self, call: RuntimeCall) -> Produced:
        """``produce_output`` on the event loop: deltas as the async stream delivers them;
        cancelling the awaiting task stops reading and closes the stream."""
        content, emit = self._prepare(call)
        wiring, at = self._wiring, self._deadline()
        try:
            async with aopen_bounded(
                wiring.clients.for_loop(),
                wiring.url,
                content=content,
                headers=wiring.headers,
                timeout_s=wiring.model.timeout_s,
                max_bytes=self.max_response_bytes,
            ) as stream:
                reader = _Reader(stream.status, stream.headers, emit)
                if reader.whole:
                    completion = reader.whole_body((await stream.abody()).body)
                else:
                    async for chunk in stream.aiter_bytes():
                        if reader.feed(chunk):
                            break
                    completion = reader.completion()
        except WireFailure as wire:
            raise wire.to_error(self._descriptor, wiring.redactor) from None
        return Produced(completion.output, completion, deadline_at=at)

    def release(self) -> None:
        """Release pooled connections, flush the adapter-owned Langfuse client (bounded)."""
        self._wiring.close()

    async def arelease(self) -> None:
        await self._wiring.aclose()


class _Reader:
    """The response as it arrives, fed chunk by chunk (sans-IO: the sync and async paths
    differ only in how they get the chunks): deltas out through ``emit``, then the
    completion the non-streaming rules give for the assembled message."""

    def __init__(self, status: int, headers: Mapping[str, str], emit: Emit) -> None:
        self._status = status
        self._emit = emit
        media = headers.get("content-type", "").partition(";")[0].strip().lower()
        #: An error status, or a gateway that ignored ``stream: true``: read it whole.
        self.whole = not 200 <= status < 300 or media == "application/json"
        self._headers = headers
        self._parser, self._folder, self._done = SSEParser(), ChunkFolder(), False

    def whole_body(self, body: bytes) -> Completion:
        failure = failure_for_status(self._status, self._headers, body)
        if failure is not None:
            raise failure
        return _whole_body(body, self._emit)

    def feed(self, chunk: bytes) -> bool:
        """Fold one chunk; True once the stream said it is done (``[DONE]``)."""
        for event in self._parser.feed(chunk):
            if event.data == _DONE:
                self._done = True
                return True
            try:
                data = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                raise WireFailure(
                    RuntimeFailureCode.INVALID_RESPONSE, "stream event data is not JSON"
                ) from None
            if event.event == "error" and not (isinstance(data, dict) and "error" in data):
                raise stream_error(data)
            for out in self._folder.fold(data):
                self._emit(out)
        return False

    def completion(self) -> Completion:
        folder = self._folder
        if not self._done and folder.finish_reason is None:
            raise WireFailure(
                RuntimeFailureCode.UNAVAILABLE,
                "model stream ended before it finished (no finish_reason, no [DONE])",
            )
        for out in folder.finish():  # tool calls held back while another one streamed
            self._emit(out)
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
