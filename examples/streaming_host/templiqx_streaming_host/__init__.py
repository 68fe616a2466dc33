"""A reference streaming host adapter: OpenAI-compatible chat completions over SSE."""

from ._runtime import ADAPTER_ID, StreamingHostRuntime
from ._sse import ServerSentEvent, SSEParser

__all__ = ["ADAPTER_ID", "SSEParser", "ServerSentEvent", "StreamingHostRuntime"]
