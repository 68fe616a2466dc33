"""An incremental Server-Sent Events parser (WHATWG HTML, "event stream interpretation").

Not ``httpx-sse``: it reads ``iter_text()`` itself (no room for the byte-counting size and
deadline bounds), refuses a response without ``text/event-stream`` (a recorded Together
stream has none), decodes with the declared charset instead of UTF-8, and keeps a leading
BOM (losing the first event).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["SSEParser", "ServerSentEvent"]

_BOM = b"\xef\xbb\xbf"
_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True)
class ServerSentEvent:
    data: str
    event: str = "message"
    id: str = ""


class SSEParser:
    """Splits lines on CRLF, LF or a lone CR (also across chunks), then applies the spec's
    field rules; an event not closed by a blank line at end of stream is discarded."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._started = False  # the BOM check happens once, on the first three bytes
        self._pending_cr = False  # a CR ended the last chunk: a following LF is its pair
        self._data: list[str] = []
        self._event = ""
        self._last_id = ""
        self.retry_ms: int | None = None  # the stream's reconnection time, if it set one

    def feed(self, chunk: bytes) -> Iterator[ServerSentEvent]:
        if not chunk:
            return
        if self._pending_cr:
            self._pending_cr = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        self._buffer += chunk
        if not self._started:
            if len(self._buffer) < len(_BOM) and _BOM.startswith(bytes(self._buffer)):
                return  # could still be a BOM: wait for more bytes
            if self._buffer.startswith(_BOM):
                del self._buffer[: len(_BOM)]
            self._started = True
        yield from self._lines()

    def _lines(self) -> Iterator[ServerSentEvent]:
        buffer, start = self._buffer, 0
        while (end := _EOL.search(buffer, start)) is not None:
            if end.group() == b"\r" and end.end() == len(buffer):
                self._pending_cr = True  # CRLF may be split across two chunks
            event = self._line(bytes(buffer[start : end.start()]).decode("utf-8", "replace"))
            start = end.end()
            if event is not None:
                yield event
        del buffer[:start]

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
