"""OpenAI-compatible chat completions with ``stream: true`` on the Langfuse adapter's
building blocks, and the ``openai-stream`` entry point's factory."""

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
    Unsupported,
)
from templiqx_core.adapters import Produced, RuntimeCall, RuntimeOptions
from templiqx_langfuse import LangfuseConfig, ModelConfig
from templiqx_langfuse.building_blocks import (
    MAX_RESPONSE_BYTES,
    Completion,
    HostWiring,
    WireFailure,
    WiringOptions,
    aopen_bounded,
    deadline_at,
    open_bounded,
    parse_completion,
)

from ._chunks import ChunkFolder, Emitted, SSEParser, invalid_response, stream_error

ADAPTER_ID = "templiqx-streaming-host"
_DESCRIPTOR = AdapterDescriptor(id=ADAPTER_ID, version="0.1.0", capabilities=["structured_output"])


class StreamingHostRuntime(RuntimeAdapter):
    """One streamed chat completion per call, thread-safe, bounded in bytes and time."""

    def __init__(
        self,
        model: ModelConfig,
        langfuse: LangfuseConfig | None = None,
        *,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        **options: Unpack[WiringOptions],
    ) -> None:
        self.max_response_bytes = max_response_bytes
        self._wiring = HostWiring.build(model, langfuse, accept="text/event-stream", **options)

    def descriptor(self) -> AdapterDescriptor:
        return _DESCRIPTOR

    def _begin(self, call: RuntimeCall) -> tuple[_Reader, dict[str, Any]]:
        """The reader (its first token: ``completion_start_time``) and the request."""
        wiring = self._wiring
        reader = _Reader(call.emit, deadline_at(wiring.model.timeout_s))
        payload = orjson.loads(wiring.begin(call, lambda: reader.first_token).content)
        payload |= {"stream": True, "stream_options": {"include_usage": True}}
        return reader, {
            "url": wiring.url,
            "content": orjson.dumps(payload, option=orjson.OPT_SORT_KEYS),
            "headers": wiring.headers,
            "timeout_s": wiring.model.timeout_s,
            "max_bytes": self.max_response_bytes,
        }

    def produce_output(self, call: RuntimeCall) -> Produced:
        reader, request = self._begin(call)
        wiring = self._wiring
        with wiring.settled(self), open_bounded(wiring.clients.sync, **request) as stream:
            if _read_whole(stream.status, stream.headers):
                body = stream.body()
                return reader.whole(stream.settle(body), body)
            for chunk in stream.iter_bytes():
                if reader.feed(chunk):
                    break
            return reader.completion()

    async def aproduce_output(self, call: RuntimeCall) -> Produced:
        reader, request = self._begin(call)
        with self._wiring.settled(self):
            async with aopen_bounded(self._wiring.clients.for_loop(), **request) as stream:
                if _read_whole(stream.status, stream.headers):
                    body = await stream.abody()
                    return reader.whole(stream.settle(body), body)
                async for chunk in stream.aiter_bytes():
                    if reader.feed(chunk):
                        break
                return reader.completion()

    def release(self) -> None:
        self._wiring.close()

    async def arelease(self) -> None:
        await self._wiring.aclose()


def runtime_factory(options: RuntimeOptions) -> RuntimeAdapter:
    """Configured from the environment, or replaying a cassette offline, as ``langfuse``."""
    if options.replay is None:  # TEMPLIQX_* / OPENAI_* / LANGFUSE_*, as the Langfuse adapter
        return StreamingHostRuntime(
            ModelConfig.from_env(options.env), LangfuseConfig.from_env(options.env)
        )
    try:
        from templiqx_langfuse.testing.replay import cli_replay
    except ImportError:
        needs = "--replay needs vcrpy: pip install 'templiqx-langfuse[testing]'"
        raise Unsupported(needs) from None
    return cli_replay(options, build=StreamingHostRuntime)


def _read_whole(status: int, headers: Mapping[str, str]) -> bool:
    """An error status, or a gateway that ignored ``stream: true``: read the body whole."""
    media = headers.get("content-type", "").partition(";")[0].strip().lower()
    return not 200 <= status < 300 or media == "application/json"


class _Reader:
    """The response fed chunk by chunk, sans I/O: deltas out through ``emit``, then one result."""

    def __init__(self, emit: Callable[[Emitted], None], deadline: float) -> None:
        self._call_emit, self.deadline = emit, deadline
        self.first_token: datetime | None = None
        self._parser, self._folder, self._done = SSEParser(), ChunkFolder(), False

    def _emit(self, event: Emitted) -> None:
        if self.first_token is None:
            self.first_token = datetime.now(UTC)
        self._call_emit(event)

    def whole(self, completion: Completion, body: bytes) -> Produced:
        """A plain completion (its status checked): one delta with its whole content."""
        content = orjson.loads(body)["choices"][0]["message"].get("content")
        if isinstance(content, str):
            self._emit(DeltaEvent(text=content))
        return Produced(completion.output, completion, deadline_at=self.deadline)

    def feed(self, chunk: bytes) -> bool:
        """Fold one chunk; True once the stream said it is done (``[DONE]``)."""
        for event in self._parser.feed(chunk):
            if event.data == "[DONE]":
                self._done = True
                return True
            try:
                data = orjson.loads(event.data)
            except orjson.JSONDecodeError:
                raise invalid_response("stream event data is not JSON") from None
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
        completion = parse_completion(orjson.dumps(folder.head | {"choices": [choice]}))
        return Produced(completion.output, completion, deadline_at=self.deadline)
