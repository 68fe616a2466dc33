"""Every configured secret becomes ``[REDACTED]`` wherever text leaves, in any form it takes."""

from __future__ import annotations

import base64
import itertools
import json
import logging
import threading
import weakref
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, quote_plus

import orjson

REDACTED = "[REDACTED]"
_MIN_SECRET_LENGTH = 4  # shorter values would redact ordinary words


class SecretHeaders(dict[str, str]):
    """Headers whose values a traceback printed with its locals never shows."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"SecretHeaders({', '.join(self)}: values hidden)"


def _encodings(secret: str) -> set[str]:
    """Raw, JSON-escaped once or twice (``\\uXXXX`` for ``<>&`` too, ``\\/``), percent-encoded."""
    forms = {secret, quote(secret, safe=""), quote(secret), quote_plus(secret)}
    for ensure_ascii in (False, True):
        escaped = json.dumps(secret, ensure_ascii=ensure_ascii)[1:-1]
        forms |= {escaped, json.dumps(escaped, ensure_ascii=ensure_ascii)[1:-1]}
        html = escaped.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        forms |= {html, escaped.replace("/", "\\/")}
    return forms


class Redactor:
    """Replaces configured secrets (and their Basic-auth encodings) in text and JSON values."""

    def __init__(self, secrets: Iterable[str | None]) -> None:
        values = {s for s in secrets if s and len(s) >= _MIN_SECRET_LENGTH}
        # Langfuse authenticates with Basic base64(public:secret); cover that form too.
        values |= {
            base64.b64encode(f"{left}:{right}".encode()).decode("ascii")
            for left, right in itertools.permutations(values, 2)
        }
        values = {form for value in values for form in _encodings(value)}
        # Longest first, so a secret containing another is replaced whole.
        self._secrets = sorted(values, key=len, reverse=True)
        # A secret JSON would escape hides from the fast path's search of the JSON bytes.
        self._json_searchable = all(
            '"' not in s and "\\" not in s and all(ord(c) >= 0x20 for c in s) for s in self._secrets
        )

    def __bool__(self) -> bool:
        return bool(self._secrets)

    def text(self, value: str) -> str:
        for secret in self._secrets:
            if secret in value:
                value = value.replace(secret, REDACTED)
        return value

    def value(self, data: Any) -> Any:
        """Redact strings anywhere inside a JSON-like value (keys included)."""
        return self._walk(data) if self._secrets else data

    def json_text(self, data: Any) -> str:
        """Compact JSON, redacted in the text unless a secret is one JSON would escape."""
        value = data if self._json_searchable else self._walk(data)
        try:
            text = orjson.dumps(value).decode()
        except (TypeError, orjson.JSONEncodeError):  # a big int, an odd key
            text = json.dumps(value, default=str, ensure_ascii=False)
        return self.text(text) if self._json_searchable else text

    def _walk(self, data: Any) -> Any:
        if isinstance(data, str):
            return self.text(data)
        if isinstance(data, dict):
            return {self.text(str(k)): self._walk(v) for k, v in data.items()}
        if isinstance(data, (list, tuple)):
            return [self._walk(item) for item in data]
        return data


# They log raw headers and reason phrases: a server echoing a credential would leak it.
HTTP_LOGGERS = (
    "httpx",
    *(
        f"{core}.{part}"
        for core in ("httpcore", "httpcore2")
        for part in ("connection", "http11", "http2", "proxy")
    ),
    "opentelemetry.exporter.otlp.proto.http.trace_exporter",
    "opentelemetry.exporter.otlp.common.http",
)


_LIVE: weakref.WeakSet[Redactor] = weakref.WeakSet()  # weak: a runtime never closed leaves none
_LIVE_LOCK = threading.Lock()


def live_redactors() -> list[Redactor]:
    with _LIVE_LOCK:
        return list(_LIVE)


def redact_http_logs(redactor: Redactor, *, on: bool = True) -> None:
    """Apply ``redactor`` (or no longer) to the HTTP loggers' records."""
    for name in HTTP_LOGGERS:
        logging.getLogger(name).addFilter(_redact_record)  # once: addFilter dedupes
    with _LIVE_LOCK:
        (_LIVE.add if on else _LIVE.discard)(redactor)


def _redact_record(record: logging.LogRecord) -> bool:
    redactors = live_redactors()
    if not redactors:  # installed for good: with nothing to redact, the record as it is
        return True
    try:
        message = record.getMessage()
    except Exception:  # logging reports a malformed record; raised here, the caller would
        message = f"{record.msg} {record.args!r}"
    redacted = message
    for redactor in redactors:
        redacted = redactor.text(redacted)
    if redacted != message:
        record.msg, record.args = redacted, None
    return True
