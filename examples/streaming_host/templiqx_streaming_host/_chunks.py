"""The stream, sans I/O: an SSE parser fed raw bytes (so the size bound and deadline count
them; why not ``httpx-sse``: docs/streaming.md), and the fold of chunks into events."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from templiqx_core import DeltaEvent, RuntimeFailureCode, ToolCallDeltaEvent
from templiqx_langfuse.building_blocks import WireFailure, failure_for_status

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"


class SSEParser:
    """WHATWG's rules (CRLF, LF or lone CR, also split across chunks); ``id`` and ``retry``
    are ignored like unknown fields: they serve a reconnect, which a model call never makes."""

    def __init__(self) -> None:
        # The spec's decoder: one leading BOM dropped (however the chunks split it), invalid
        # bytes as U+FFFD; a character split across chunks waits for its end.
        self._decode = codecs.getincrementaldecoder("utf-8-sig")("replace").decode
        self._buffer = ""
        self._pending_cr = False  # a CR ended the last chunk: a following LF is its pair
        self._data: list[str] = []
        self._event = ""

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        text = self._decode(chunk)
        if self._pending_cr and text:
            self._pending_cr = False
            text = text.removeprefix("\n")
        buffer, start = self._buffer + text, 0
        while (end := _EOL.search(buffer, start)) is not None:
            if end.group() == "\r" and end.end() == len(buffer):
                self._pending_cr = True  # CRLF may be split across two chunks
            event = self._line(buffer[start : end.start()])
            start = end.end()
            if event is not None:
                yield event
        self._buffer = buffer[start:]

    def _line(self, line: str) -> ServerSentEvent | None:
        if not line:  # a blank line dispatches the event, if it has data
            data, self._data = self._data, []
            event, self._event = self._event or "message", ""
            return ServerSentEvent("\n".join(data), event) if data else None
        name, _, value = line.partition(":")  # a comment's name is "": no field
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        return None


Emitted = DeltaEvent | ToolCallDeltaEvent
CallKey = tuple[int, int]  # (0, provider index) or (1, arrival ordinal)


@dataclass
class ToolCall:
    key: CallKey
    id: str | None = None
    type: str = "function"
    name: str = ""
    arguments: list[str] = field(default_factory=list)
    started: bool = False  # a non-empty arguments fragment arrived: the name is complete
    emitted: int = 0  # how many of ``arguments`` went out as events
    closed: bool = False  # the arguments closed their top-level JSON object or array
    _depth: int = 0  # bracket depth of the arguments so far (scanned once, incrementally)
    _in_string: bool = False
    _escaped: bool = False

    def _scan(self, piece: str) -> None:
        """Whether the arguments closed, tracked incrementally (re-parsing would be quadratic)."""
        for char in piece:
            if self.closed:
                break
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif char == "\\":
                    self._escaped = True
                elif char == '"':
                    self._in_string = False
            elif char == '"':
                self._in_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                self.closed = self._depth <= 0

    def as_message(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": "".join(self.arguments)}
        return {"id": self.id, "type": self.type, "function": function}

    def merge(self, fragment: dict[str, Any], name: str | None, piece: str) -> None:
        """Fold one fragment in; a resent id or name is the same call, name pieces concatenate."""
        if isinstance(new_id := fragment.get("id"), str) and new_id:
            if self.id not in (None, new_id):
                raise invalid_response("a tool call received a second, different id")
            self.id = new_id
        if isinstance(fragment.get("type"), str):
            self.type = fragment["type"]
        if name and name != self.name:
            if self.started and self.name:
                raise invalid_response("a tool call changed its name after its arguments began")
            self.name += name
        if self.closed and piece.strip():
            raise invalid_response("a tool call continued after its arguments were complete")
        if self.closed:
            piece = ""  # insignificant whitespace after the closing bracket
        self.arguments.append(piece)
        self.started = self.started or bool(piece)
        self._scan(piece)


def invalid_response(detail: str) -> WireFailure:
    return WireFailure(RuntimeFailureCode.INVALID_RESPONSE, detail)


def stream_error(error: Any) -> WireFailure:
    """An error event mapped by the status it names (never its text); none: unavailable."""
    status = None
    for key in ("status_code", "status", "code") if isinstance(error, dict) else ():
        value = error.get(key)
        if isinstance(value, str) and value.isascii() and value.isdigit():  # "²" is a digit
            value = int(value)
        if isinstance(value, int) and not isinstance(value, bool):
            status = value
            break
    detail = "model stream reported an error" + (f" (status {status})" if status else "")
    if status is None:
        return WireFailure(RuntimeFailureCode.UNAVAILABLE, detail)
    mapped = failure_for_status(status, {}, b"")
    return WireFailure(mapped.code if mapped else RuntimeFailureCode.PERMANENT, detail)


class ChunkFolder:
    """Events carry no call index: one tool call streams live until it closes, others wait."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.refusal: list[str] = []
        self.finish_reason: str | None = None
        self.head: dict[str, Any] = {"id": None, "model": None, "usage": None}
        self.calls: dict[CallKey, ToolCall] = {}
        self._live: ToolCall | None = None  # the one call whose fragments go out at once
        self._last_unindexed: ToolCall | None = None
        self._arrivals = 0

    def fold(self, chunk: Any) -> list[Emitted]:
        """One parsed ``data:`` payload; raises ``WireFailure`` for an error event."""
        if not isinstance(chunk, dict):
            raise invalid_response("stream event is not a JSON object")
        if chunk.get("error") is not None:
            raise stream_error(chunk["error"])
        for key in ("id", "model"):  # the first of each
            if self.head[key] is None and isinstance(chunk.get(key), str):
                self.head[key] = chunk[key]
        usage = chunk.get("usage")
        if usage is None and isinstance(chunk.get("x_groq"), dict):
            usage = chunk["x_groq"].get("usage")
        if usage is not None:
            self.head["usage"] = usage
        choices = chunk.get("choices")
        events: list[Emitted] = []
        for choice in choices if isinstance(choices, list) else ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            if isinstance(finish := choice.get("finish_reason"), str):
                self.finish_reason = finish
            delta = choice.get("delta")
            delta = delta if isinstance(delta, dict) else {}
            for piece in _content_text(delta.get("content")):
                self.text.append(piece)
                events.append(DeltaEvent(text=piece))
            if isinstance(refusal := delta.get("refusal"), str) and refusal:
                self.refusal.append(refusal)
            tool_calls = delta.get("tool_calls")
            for fragment in tool_calls if isinstance(tool_calls, list) else ():
                if isinstance(fragment, dict):
                    events += self._tool_fragment(fragment)
        return events

    def _tool_fragment(self, fragment: dict[str, Any]) -> list[Emitted]:
        function = fragment.get("function")
        function = function if isinstance(function, dict) else {}
        name = function.get("name") if isinstance(function.get("name"), str) else None
        arguments = function.get("arguments")
        piece = arguments if isinstance(arguments, str) else ""
        index = fragment.get("index")
        if isinstance(index, int) and not isinstance(index, bool):
            call = self.calls.setdefault((0, index), ToolCall((0, index)))
        elif fragment.get("id") or name or self._last_unindexed is None:
            key = (1, self._arrivals)
            call = self._last_unindexed = self.calls.setdefault(key, ToolCall(key))
            self._arrivals += 1  # no index: the next call in arrival order
        else:
            call = self._last_unindexed
        call.merge(fragment, name, piece)
        if self._live is None or (call is not self._live and self._live.closed):
            self._live = call  # the live call is finished: the next one streams
        if call is not self._live or not (call.name and call.started):
            return []  # held: another call streams, or the name may still be growing
        return self._release(call)

    @staticmethod
    def _release(call: ToolCall) -> list[Emitted]:
        """The call's fragments not yet sent: named if they are its first event."""
        pending, first = "".join(call.arguments[call.emitted :]), call.emitted == 0
        call.emitted = len(call.arguments)
        if not (first or pending):
            return []
        return [ToolCallDeltaEvent(name=call.name if first else "", arguments_fragment=pending)]

    def finish(self) -> list[Emitted]:
        """At the end of the stream: what is still held, the live call first, then by index."""
        self._check_named()
        live = [self._live] if self._live is not None else []
        rest = [self.calls[k] for k in sorted(self.calls) if self.calls[k] is not self._live]
        return [event for call in (*live, *rest) for event in self._release(call)]

    def _check_named(self) -> None:
        if not all(call.name for call in self.calls.values()):
            raise invalid_response("a tool call never received a name")

    def message(self) -> dict[str, Any]:
        """The assembled choice-0 message, in the shape of a non-streamed completion."""
        self._check_named()
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
    parts = content if isinstance(content, list) else []
    texts = [p.get("text") for p in parts if isinstance(p, dict) and p.get("type") == "text"]
    return [text for text in texts if isinstance(text, str) and text]
