"""``StreamingHostRuntime``: OpenAI-compatible chat completions with ``stream: true``.

``execute_streaming`` emits ``Delta``/``ToolCallDelta`` events as the SSE arrive;
``execute`` reads the same stream and drops them. Below the SSE framing all is the
Langfuse adapter's own (``templiqx_langfuse.building_blocks``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Unpack

import orjson

from templiqx_core import AdapterDescriptor, DeltaEvent, RuntimeAdapter, RuntimeFailureCode
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

from ._chunks import ChunkFolder, Emitted, stream_error
from ._sse import SSEParser

__all__ = ["ADAPTER_ID", "StreamingHostRuntime"]

ADAPTER_ID = "templiqx-streaming-host"
CAPABILITIES = ("structured_output",)
_VERSION = "0.1.0"
_DONE = "[DONE]"


class StreamingHostRuntime(RuntimeAdapter):
    """Streams one chat completion per call; thread-safe. ``max_response_bytes`` bounds
    the stream, ``ModelConfig.timeout_s`` is its deadline; an exception from the
    sink (a cancel) closes the connection and propagates unchanged."""

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

    def _begin(self, call: RuntimeCall) -> tuple[_Reader, dict[str, Any]]:
        """The response reader (it notes the first token, the generation's
        ``completion_start_time``) and the streaming request."""
        wiring = self._wiring
        reader = _Reader(call.emit, deadline_at(wiring.model.timeout_s))
        body = wiring.begin(call, lambda: reader.first_token)
        payload = orjson.loads(body.content)
        payload |= {"stream": True, "stream_options": {"include_usage": True}}
        return reader, {
            "url": wiring.url,
            "content": orjson.dumps(payload, option=orjson.OPT_SORT_KEYS),
            "headers": wiring.headers,
            "timeout_s": wiring.model.timeout_s,
            "max_bytes": self.max_response_bytes,
        }

    def produce_output(self, call: RuntimeCall) -> Produced:
        """One streamed round trip; deltas go out through ``call.emit`` as they arrive."""
        reader, request = self._begin(call)
        with (
            self._wiring.settled(self),
            open_bounded(self._wiring.http, **request) as stream,
        ):
            if _read_whole(stream.status, stream.headers):
                return reader.whole_body(stream.status, stream.headers, stream.body())
            for chunk in stream.iter_bytes():
                if reader.feed(chunk):
                    break
            return reader.completion()

    async def aproduce_output(self, call: RuntimeCall) -> Produced:
        """``produce_output`` on the event loop; cancelling the task closes the stream."""
        reader, request = self._begin(call)
        with self._wiring.settled(self):
            async with aopen_bounded(self._wiring.clients.for_loop(), **request) as stream:
                if _read_whole(stream.status, stream.headers):
                    body = await stream.abody()
                    return reader.whole_body(stream.status, stream.headers, body)
                async for chunk in stream.aiter_bytes():
                    if reader.feed(chunk):
                        break
                return reader.completion()

    def release(self) -> None:
        """Release pooled connections, flush the adapter-owned Langfuse client (bounded)."""
        self._wiring.close()

    async def arelease(self) -> None:
        await self._wiring.aclose()


def _read_whole(status: int, headers: Mapping[str, str]) -> bool:
    """An error status, or a gateway that ignored ``stream: true``: read the body whole."""
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    return not 200 <= status < 300 or media == "application/json"


class _Reader:
    """The response fed chunk by chunk (sans-IO, for the sync and async paths): deltas out
    through ``emit``, then the non-streaming rules' ``Produced`` for the whole message."""

    def __init__(self, emit: Callable[[Emitted], None], deadline: float) -> None:
        self._call_emit, self.deadline = emit, deadline
        self.first_token: datetime | None = None
        self._parser, self._folder, self._done = SSEParser(), ChunkFolder(), False

    def _emit(self, event: Emitted) -> None:
        if self.first_token is None:
            self.first_token = datetime.now(UTC)
        self._call_emit(event)

    def _produced(self, completion: Completion) -> Produced:
        return Produced(completion.output, completion, deadline_at=self.deadline)

    def whole_body(self, status: int, headers: Mapping[str, str], body: bytes) -> Produced:
        """An error status, or one delta with the whole content of a plain completion."""
        failure = failure_for_status(status, headers, body)
        if failure is not None:
            raise failure
        completion = parse_completion(body)
        message = orjson.loads(body)["choices"][0]["message"]
        if isinstance(message.get("content"), str):
            self._emit(DeltaEvent(text=message["content"]))
        return self._produced(completion)

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

    def completion(self) -> Produced:
        folder = self._folder
        if not self._done and folder.finish_reason is None:
            raise WireFailure(
                RuntimeFailureCode.UNAVAILABLE,
                "model stream ended before it finished (no finish_reason, no [DONE])",
            )
        for out in folder.finish():  # tool calls held back while another one streamed
            self._emit(out)
        choice = {"index": 0, "message": folder.message(), "finish_reason": folder.finish_reason}
        completion = {"id": folder.response_id, "model": folder.model, "usage": folder.usage}
        return self._produced(parse_completion(orjson.dumps(completion | {"choices": [choice]})))
