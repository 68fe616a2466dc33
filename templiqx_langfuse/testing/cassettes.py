"""vcrpy configuration for recording and replaying the adapter's model calls (SPEC §6).

Credentials are scrubbed when an interaction is recorded, on both the request and the
response side; a loopback server's random port is folded into one stable host so a
recording replays on any machine; matching is method + URI + body; playback never
repeats an interaction, and a request with no recorded match raises instead of
reaching the network. The Langfuse OTLP export is never recorded.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import vcr
from vcr.cassette import Cassette
from vcr.errors import CannotOverwriteExistingCassetteException
from vcr.record_mode import RecordMode

from templiqx_core import NotFound

from .._redaction import Redactor

__all__ = [
    "LOOPBACK_REPLAY_HOST",
    "SCRUBBED_REQUEST_HEADERS",
    "SCRUBBED_RESPONSE_HEADERS",
    "UnplayedInteractions",
    "cassette_config",
    "no_match_error",
    "use_cassette",
]

SCRUBBED_REQUEST_HEADERS = (
    "authorization",
    "api-key",
    "x-api-key",
    "cookie",
    "proxy-authorization",
    "x-langfuse-public-key",
    "openai-organization",
    "openai-project",
)
SCRUBBED_RESPONSE_HEADERS = ("set-cookie", "openai-organization", "openai-project")
# Recordings against the loopback reference server use a random port; fold it into a
# stable, unresolvable host so cassettes replay anywhere (and can never hit the network).
LOOPBACK_REPLAY_HOST = "http://loopback.templiqx.invalid"
_LOOPBACK = re.compile(r"^http://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")
_LANGFUSE_HOSTS = ("cloud.langfuse.com", "us.cloud.langfuse.com", "eu.cloud.langfuse.com")


class UnplayedInteractions(AssertionError):
    """A replayed cassette still holds interactions no request asked for."""


def _header_names(headers: dict[str, Any]) -> list[str]:
    return [name for name in headers if name.lower() in SCRUBBED_RESPONSE_HEADERS]


def cassette_config(
    *,
    record_mode: str = "none",
    secrets: Iterable[str | None] = (),
    langfuse_hosts: Iterable[str] = (),
) -> dict[str, Any]:
    """Keyword arguments for ``VCR.use_cassette`` / pytest-recording's ``vcr_config`` fixture.

    ``secrets`` are replaced by ``[REDACTED]`` in recorded bodies as a last line of
    defence (headers that carry credentials are removed outright).
    """
    redactor = Redactor(secrets)

    def before_record_request(request: Any) -> Any:
        request.uri = _LOOPBACK.sub(LOOPBACK_REPLAY_HOST, request.uri)
        if redactor and isinstance(request.body, bytes):
            request.body = redactor.text(request.body.decode("utf-8", "replace")).encode()
        return request

    def before_record_response(response: dict[str, Any]) -> dict[str, Any]:
        headers = response.get("headers", {})
        for name in _header_names(headers):
            del headers[name]
        body = response.get("body", {})
        if redactor and isinstance(body.get("string"), bytes):
            text = body["string"].decode("utf-8", "replace")
            body["string"] = redactor.text(text).encode()
        return response

    return {
        "record_mode": record_mode,
        # host names the recording server's random port: noise in every re-recording.
        "filter_headers": [*SCRUBBED_REQUEST_HEADERS, "host"],
        "before_record_request": before_record_request,
        "before_record_response": before_record_response,
        "decode_compressed_response": True,
        "match_on": ("method", "uri", "body"),
        "allow_playback_repeats": False,
        "ignore_hosts": [*_LANGFUSE_HOSTS, *langfuse_hosts],
        "record_on_exception": False,
    }


def no_match_error(error: CannotOverwriteExistingCassetteException) -> NotFound:
    """A clear, one-line error for a request the cassette cannot answer."""
    cassette = getattr(error.cassette, "_path", "the cassette")
    reason = getattr(error, "reason", "no_match")
    return NotFound(
        f"cassette {cassette} has no unplayed recorded response matching this request "
        f"(method, URI and body; reason: {reason}); re-record it (see cassettes/README.md)"
    )


@contextmanager
def use_cassette(
    path: str | Path,
    *,
    record_mode: str = "none",
    secrets: Iterable[str | None] = (),
    require_all_played: bool = True,
) -> Iterator[Cassette]:
    """Replay (or record) ``path``; fail when a replay leaves interactions unplayed."""
    path = Path(path)
    if record_mode == "none" and not path.is_file():
        raise NotFound(f"cassette {path} does not exist")
    config = cassette_config(record_mode=record_mode, secrets=secrets)
    with vcr.VCR().use_cassette(str(path), **config) as cassette:
        yield cassette
    if (
        require_all_played
        and RecordMode(record_mode) == RecordMode.NONE
        and not cassette.all_played
    ):
        unplayed = len(cassette) - len(cassette.play_counts)
        raise UnplayedInteractions(f"cassette {path}: {unplayed} recorded interaction(s) unplayed")
