"""An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation"),
fed raw bytes so the size bound and deadline count them (why not ``httpx-sse``: its public
API reads ``iter_text()`` itself; docs/streaming.md says what else it does otherwise)."""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SSEParser", "ServerSentEvent"]

_EOL = re.compile(r"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str = ""


class SSEParser:
    """Splits lines on CRLF, LF or a lone CR (also across chunks), then applies the spec's
    field rules; an event not closed by a blank line at end of stream is discarded."""

    def __init__(self) -> None:
        # The spec's decoder: one leading BOM dropped (however the chunks split it), invalid
        # bytes as U+FFFD; a character split across chunks waits for its end.
        self._decode = codecs.getincrementaldecoder("utf-8-sig")("replace").decode
        self._buffer = ""
        self._pending_cr = False  # a CR ended the last chunk: a following LF is its pair
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self.retry_ms: int | None = None  # the stream's reconnection time, if it set one

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
            return ServerSentEvent("\n".join(data), event, self._last_id) if data else None
        name, _, value = line.partition(":")  # a comment's name is "": no field
        value = value.removeprefix(" ")
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id" and "\0" not in value:
            self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None
