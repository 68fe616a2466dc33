"""vcrpy rules for the adapter's model calls: secrets scrubbed before anything is written,
one host for every loopback port, each interaction played once, Langfuse never recorded."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vcr
from vcr.cassette import Cassette
from vcr.errors import CannotOverwriteExistingCassetteException
from vcr.persisters.filesystem import FilesystemPersister

from templiqx_core import InvalidData, NotFound
from templiqx_core.adapters import load_document

from .. import _config
from .._redaction import REDACTED, Redactor, live_redactors

__all__ = [
    "LOOPBACK_REPLAY_HOST",
    "SCRUBBED_REQUEST_HEADERS",
    "SCRUBBED_RESPONSE_HEADERS",
    "ActiveCassette",
    "CassetteMiss",
    "Scrubber",
    "ScrubbingPersister",
    "UnplayedInteractions",
    "cassette_config",
    "cassette_miss",
    "no_match_error",
    "open_cassette",
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
SECRET_ENV_VARS = (
    _config.ENV_MODEL_API_KEY,
    _config.ENV_OPENAI_API_KEY,
    _config.ENV_LANGFUSE_PUBLIC_KEY,
    _config.ENV_LANGFUSE_SECRET_KEY,
)
# Recordings against the loopback reference server use a random port; fold it into a
# stable, unresolvable host so cassettes replay anywhere (and can never hit the network).
LOOPBACK_REPLAY_HOST = "http://loopback.templiqx.invalid"
_LOOPBACK_URI = re.compile(r"^http://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")
_LANGFUSE_API = re.compile(r"^https?://[^/]+/api/public/")
_LANGFUSE_HOSTS = ("cloud.langfuse.com", "us.cloud.langfuse.com", "eu.cloud.langfuse.com")
# Shapes of provider and Langfuse credentials, also partly masked ones (OpenAI's 401
# echoes ``sk-proj-****…abcd``), and of credentials after an auth scheme.
_CREDENTIAL = re.compile(
    r"(?<![A-Za-z0-9])(?:sk|pk|rk)-(?:lf-|proj-|ant-|svcacct-|admin-)?[A-Za-z0-9_*-]{8,}"
    r"|(?<![A-Za-z0-9])AIza[A-Za-z0-9_-]{30,}"
    r"|(?<![A-Za-z0-9])(?:gsk|ghp|gho|github_pat|xai)[_-][A-Za-z0-9_]{20,}"
)
_AUTH_SCHEME = re.compile(r"\b(Bearer|Basic|Token)\s+[A-Za-z0-9._~+/=*-]{6,}", re.IGNORECASE)
FORMAT_ONLY = (
    "the bodies differ only in response_format (the output schema sent and its strict "
    "flag: ModelConfig.strict, TEMPLIQX_MODEL_STRICT); re-record the cassette, or set "
    "the strict mode it was recorded with"
)
_redactor = functools.lru_cache(maxsize=8)(Redactor)


class UnplayedInteractions(AssertionError):
    """A replayed cassette still holds interactions no request asked for."""


class CassetteMiss(NotFound):
    """A request the cassette has no unplayed recorded answer for (``TQX_NOT_FOUND``)."""


class Scrubber:
    """Scrubs given secrets, keys in ``env`` or live runtimes, and credential shapes."""

    def __init__(
        self, secrets: Iterable[str | None] = (), env: Mapping[str, str] | None = None
    ) -> None:
        self._fixed: tuple[str, ...] = ()
        self._env = env
        self.add(secrets)

    def add(self, secrets: Iterable[str | None]) -> None:
        """Also scrub ``secrets``: keys a test or runtime names after the cassette opened."""
        self._fixed = (*self._fixed, *(s for s in secrets if s and s not in self._fixed))

    def text(self, value: str) -> str:
        env = os.environ if self._env is None else self._env
        value = _redactor((*self._fixed, *(env.get(name) for name in SECRET_ENV_VARS))).text(value)
        for redactor in live_redactors():
            value = redactor.text(value)
        return _CREDENTIAL.sub(REDACTED, _AUTH_SCHEME.sub(rf"\1 {REDACTED}", value))

    def body(self, value: Any) -> Any:
        """``text`` of str, bytes (binary as latin-1: ASCII secrets still match) or lists."""
        if isinstance(value, (list, tuple)):  # header values, whatever shape a hook left
            return [self.body(item) for item in value]
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, bytes) or not value:
            return value
        try:
            encoding, text = "utf-8", value.decode("utf-8")
        except UnicodeDecodeError:
            encoding, text = "latin-1", value.decode("latin-1")
        scrubbed = self.text(text)
        return value if scrubbed == text else scrubbed.encode(encoding, "replace")

    def request(self, request: Any) -> Any:
        """vcrpy's ``before_record_request``, run on live requests too: matches compare alike."""
        if _LANGFUSE_API.match(request.uri):
            return None
        request.uri = self.text(_LOOPBACK_URI.sub(LOOPBACK_REPLAY_HOST, request.uri))
        request.body = self.body(request.body)
        request.headers = {
            name: self.text(value)
            for name, value in request.headers.items()
            if name.lower() not in SCRUBBED_REQUEST_HEADERS
        }
        return request

    def response(self, response: dict[str, Any]) -> dict[str, Any]:
        """vcrpy's ``before_record_response``."""
        response["headers"] = {
            self.text(name): self.body(values)
            for name, values in (response.get("headers") or {}).items()
            if name.lower() not in SCRUBBED_RESPONSE_HEADERS
        }
        for part, key in (("status", "message"), ("body", "string")):
            if isinstance(response.get(part), dict) and key in response[part]:
                response[part][key] = self.body(response[part][key])
        return response


def cassette_config(
    scrubber: Scrubber | None = None, ignore_hosts: Iterable[str] = ()
) -> dict[str, Any]:
    """``VCR.use_cassette`` keywords / ``vcr_config``, no ``record_mode`` (--record-mode wins)."""
    scrub = scrubber or Scrubber()
    return {
        # host names the recording server's random port: noise in every re-recording.
        "filter_headers": [*SCRUBBED_REQUEST_HEADERS, "host"],
        "before_record_request": scrub.request,
        "before_record_response": scrub.response,
        "decode_compressed_response": True,
        "match_on": ("method", "uri", "body"),
        "allow_playback_repeats": False,
        "ignore_hosts": [*_LANGFUSE_HOSTS, *ignore_hosts],
        "record_on_exception": False,
    }


class ScrubbingPersister:
    """vcrpy's persister, re-scrubbing what it writes (whatever a host's hooks left)."""

    def __init__(self, inner: Any, scrubber: Scrubber, *, required: bool = False) -> None:
        self.inner, self.scrubber, self.required = inner, scrubber, required

    def load_cassette(self, cassette_path: str, serializer: Any) -> Any:
        path = Path(cassette_path)
        if path.is_file():
            load_document(path)  # safe YAML, aliases bounded, before vcrpy's own loader
        elif self.required:
            raise NotFound(f"cassette {path} does not exist; record it or fix the path")
        try:
            return self.inner.load_cassette(cassette_path, serializer)
        except (LookupError, TypeError, ValueError, AttributeError) as error:  # vcrpy's load
            kind = type(error).__name__
            raise InvalidData(f"{cassette_path}: not a readable cassette ({kind})") from None

    def save_cassette(
        self, cassette_path: str, cassette_dict: dict[str, Any], serializer: Any
    ) -> None:
        kept: dict[str, list[Any]] = {"requests": [], "responses": []}
        pairs = zip(cassette_dict["requests"], cassette_dict["responses"], strict=True)
        for request, response in pairs:
            if (scrubbed := self.scrubber.request(copy.deepcopy(request))) is not None:
                kept["requests"].append(scrubbed)
                kept["responses"].append(self.scrubber.response(copy.deepcopy(response)))
        self.inner.save_cassette(cassette_path, {**cassette_dict, **kept}, serializer=serializer)


@dataclass
class ActiveCassette:
    """A cassette in use, its scrubber, and the misses met (the plugin reports swallowed ones)."""

    path: Path
    cassette: Cassette
    scrubber: Scrubber
    misses: list[CassetteMiss] = field(default_factory=list)

    @property
    def replaying(self) -> bool:
        """Answering from a recording that may not grow (``none``, or ``once`` over a file)."""
        return bool(self.cassette.write_protected)

    def unplayed_error(self) -> UnplayedInteractions | None:
        count = len(self.cassette) - len(self.cassette.play_counts) if self.replaying else 0
        message = f"cassette {self.path}: {count} recorded interaction(s) unplayed"
        return UnplayedInteractions(message) if count else None


def _causes(error: BaseException | None) -> list[BaseException]:
    """``error`` and its causes and contexts, each once."""
    found: list[BaseException] = []
    while error is not None and all(error is not seen for seen in found):
        found.append(error)
        error = error.__cause__ or error.__context__
    return found


def cassette_miss(error: BaseException) -> CannotOverwriteExistingCassetteException | None:
    """vcrpy's miss behind ``error``, however the code under test wrapped or mapped it."""
    found = (e for e in _causes(error) if isinstance(e, CannotOverwriteExistingCassetteException))
    return next(found, None)


def no_match_error(
    error: CannotOverwriteExistingCassetteException,
    *,
    brief: bool = False,
    scrubber: Scrubber | None = None,
) -> CassetteMiss:
    """vcrpy's miss, scrubbed, as a ``CassetteMiss`` (``brief``: its first line)."""
    # vcrpy's own "How to fix" names its record modes, not the plugin's flag or default.
    text = (scrubber or Scrubber()).text(str(error)).split("\nHow to fix:")[0].rstrip()
    text += "\n\nHow to fix: re-record it, `pytest --record-mode=rewrite` (`once`: if missing)"
    if brief:
        text = f"{text.splitlines()[0]} (TEMPLIQX_DEBUG=1 shows the difference)"
    if error.reason == "no_match" and [n for n, _ in error.similar_requests[0][2]] == ["body"]:
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            recorded, sent = error.similar_requests[0][0].body, error.failed_request.body
            old, new = json.loads(recorded or b""), json.loads(sent or b"")
            formats = old.pop("response_format", None), new.pop("response_format", None)
            text += f"; {FORMAT_ONLY}" if old == new and formats[0] != formats[1] else ""
    return CassetteMiss(f"cassette {error.cassette.path}: {text}")


@contextlib.contextmanager
def open_cassette(
    path: str | Path,
    *,
    record_mode: str = "none",
    secrets: Iterable[str | None] = (),
    env: Mapping[str, str] | None = None,
    ignore_hosts: Iterable[str] = (),
) -> Iterator[ActiveCassette]:
    """``path`` under a pytest-recording record mode; ``ignore_hosts`` pass unrecorded."""
    path = Path(path)
    if record_mode == "rewrite":
        path.unlink(missing_ok=True)
        record_mode = "new_episodes"
    scrubber = Scrubber(secrets, env)
    config = cassette_config(scrubber, ignore_hosts)
    persister = ScrubbingPersister(FilesystemPersister, scrubber, required=record_mode == "none")
    opened = vcr.VCR().use_cassette(
        str(path), record_mode=record_mode, persister=persister, **config
    )
    with opened as cassette:
        yield ActiveCassette(path, cassette, scrubber)
