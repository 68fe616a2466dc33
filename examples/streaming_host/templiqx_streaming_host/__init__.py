"""A reference streaming host adapter: OpenAI-compatible chat completions over SSE."""

from ._chunks import ServerSentEvent, SSEParser
from ._runtime import ADAPTER_ID, StreamingHostRuntime

__all__ = ["ADAPTER_ID", "SSEParser", "ServerSentEvent", "StreamingHostRuntime"]
