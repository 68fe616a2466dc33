"""Folding ``chat.completion.chunk`` payloads into stream events and one final message.

Pure: no sockets. Text deltas of choice 0 become ``Delta`` events as they arrive;
tool-call fragments are assembled by the provider's ``index`` (by arrival order where a
provider sends none: a fragment with an ``id`` or a name starts the next call) and
projected onto ``ToolCallDelta{name, arguments_fragment}`` so that a consumer can put
them back together: the first event of a call carries its name, later ones an empty
name (the provider's own framing), and the fragments of one call are contiguous.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from templiqx_core import DeltaEvent, RuntimeFailureCode, ToolCallDeltaEvent
from templiqx_langfuse.building_blocks import WireFailure

__all__ = ["ChunkFolder", "ToolCall", "stream_error"]

Emitted = DeltaEvent | ToolCallDeltaEvent


CallKey = tuple[int, int]  # (0, provider index) or (1, arrival ordinal)


@dataclass
class ToolCall:
    key: CallKey
    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # fragments waiting for the name
    opened: bool = False

    def as_message(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": self.type, "function": function}


def _invalid(detail: str) -> WireFailure:
    return WireFailure(RuntimeFailureCode.INVALID_RESPONSE, detail)


def stream_error(error: Any) -> WireFailure:
    """Map an ``{"error": …}`` event like the HTTP status it names (never its text).

    A status comes from ``status_code``/``status`` or a numeric ``code``; 429 is rate
    limited, 408 a timeout, 5xx (and no status at all: the provider broke off) unavailable,
    any other status permanent.
    """
    status = None
    if isinstance(error, dict):
        for key in ("status_code", "status", "code"):
            value = error.get(key)
            if isinstance(value, int) and not isinstance(value, bool):
                status = value
                break
            if isinstance(value, str) and value.isdigit():
                status = int(value)
                break
    detail = "model stream reported an error" + (f" (status {status})" if status else "")
    if status == 429:
        return WireFailure(RuntimeFailureCode.RATE_LIMITED, detail)
    if status == 408:
        return WireFailure(RuntimeFailureCode.TIMEOUT, detail)
    if status is None or status >= 500:
        return WireFailure(RuntimeFailureCode.UNAVAILABLE, detail)
    return WireFailure(RuntimeFailureCode.PERMANENT, detail)


class ChunkFolder:
    """Accumulates one streamed chat completion; ``fold`` returns the events to emit."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.finish_reason: str | None = None
        self.usage: Any = None
        self.response_id: str | None = None
        self.model: str | None = None
        self.calls: dict[CallKey, ToolCall] = {}
        self._open: ToolCall | None = None
        self._arrivals = 0

    def fold(self, chunk: Any) -> list[Emitted]:
        """One parsed ``data:`` payload; raises ``WireFailure`` for an error event."""
        if not isinstance(chunk, dict):
            raise _invalid("stream event is not a JSON object")
        if "error" in chunk and chunk["error"] is not None:
            raise stream_error(chunk["error"])
        if self.response_id is None and isinstance(chunk.get("id"), str):
            self.response_id = chunk["id"]
        if self.model is None and isinstance(chunk.get("model"), str):
            self.model = chunk["model"]
        usage = chunk.get("usage")
        if usage is None and isinstance(chunk.get("x_groq"), dict):
            usage = chunk["x_groq"].get("usage")
        if usage is not None:
            self.usage = usage
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return []
        events: list[Emitted] = []
        for choice in choices:
            if isinstance(choice, dict) and choice.get("index", 0) == 0:
                events += self._choice(choice)
        return events

    def _choice(self, choice: dict[str, Any]) -> list[Emitted]:
        finish = choice.get("finish_reason")
        if isinstance(finish, str):
            self.finish_reason = finish
        delta = choice.get("delta")
        if not isinstance(delta, dict):
            return []
        events: list[Emitted] = []
        for piece in _content_text(delta.get("content")):
            self.text.append(piece)
            events.append(DeltaEvent(text=piece))
        refusal = delta.get("refusal")
        if isinstance(refusal, str) and refusal:
            self.refusal.append(refusal)
        tool_calls = delta.get("tool_calls")
        if isinstance(tool_calls, list):
            for fragment in tool_calls:
                if isinstance(fragment, dict):
                    events += self._tool_fragment(fragment)
        return events

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[Emitted]:
        function = fragment.get("function") if isinstance(fragment.get("function"), dict) else {}
        assert isinstance(function, dict)
        name = function.get("name") if isinstance(function.get("name"), str) else None
        arguments = function.get("arguments")
        piece = arguments if isinstance(arguments, str) else ""
        index = fragment.get("index")
        key: CallKey
        if isinstance(index, int) and not isinstance(index, bool):
            key = (0, index)
        elif fragment.get("id") or name or self._open is None:
            key = (1, self._arrivals)  # no index: the next call in arrival order
            self._arrivals += 1
        else:
            key = self._open.key
        call = self.calls.get(key)
        if call is None:
            call = self.calls[key] = ToolCall(key)
        if isinstance(fragment.get("id"), str) and call.id is None:
            call.id = fragment["id"]
        if isinstance(fragment.get("type"), str):
            call.type = fragment["type"]
        if name and not call.name:
            call.name = name
        call.arguments.append(piece)
        return self._project(call, piece)

    def _project(self, call: ToolCall, piece: str) -> list[Emitted]:
        if call.opened:
            if call is not self._open:
                # A provider interleaving two calls' fragments cannot be projected onto
                # contiguous ToolCallDelta runs without holding every call back.
                raise _invalid("tool-call fragments of different calls interleave")
            return [ToolCallDeltaEvent(name="", arguments_fragment=piece)] if piece else []
        if not call.name:
            call.held.append(piece)  # wait for the name: a call's first event names it
            return []
        self._open, call.opened = call, True
        first = "".join([*call.held, piece])
        call.held.clear()
        return [ToolCallDeltaEvent(name=call.name, arguments_fragment=first)]

    def message(self) -> dict[str, Any]:
        """The assembled choice-0 message, in the shape of a non-streamed completion."""
        if any(not call.name for call in self.calls.values()):
            raise _invalid("a streamed tool call never received a name")
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(self.text) if self.text else None,
            "refusal": "".join(self.refusal) or None,
        }
        if self.calls:
            message["tool_calls"] = [self.calls[k].as_message() for k in sorted(self.calls)]
        return message


def _content_text(content: Any) -> list[str]:
    """String content, or the ``text`` parts of list-typed content (Mistral); never thinking."""
    if isinstance(content, str):
        return [content] if content else []
    if isinstance(content, list):
        return [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
            and part["text"]
        ]
    return []
