"""An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation").

Not ``httpx-sse``: it reads ``iter_text()`` itself (no room for the byte-counting size and
deadline bounds), refuses a response without ``text/event-stream`` (a recorded Together
stream has none), decodes with the declared charset instead of UTF-8, and keeps a leading
BOM (losing the first event).
"""

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
        if not text:
            return
        if self._pending_cr:
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
        if not line:
            return self._dispatch()
        if line.startswith(":"):
            return None
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            self.retry_ms = int(value)
        return None

    def _dispatch(self) -> ServerSentEvent | None:
        data, event = self._data, self._event
        self._data, self._event = [], ""
        if not data:
            return None
        return ServerSentEvent("\n".join(data), event or "message", self._last_id)
