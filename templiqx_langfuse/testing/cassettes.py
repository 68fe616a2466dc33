"""vcrpy rules for recording and replaying the adapter's model calls: secrets scrubbed
before anything is written, loopback ports folded into one host, method + URI + body
matching, each interaction played once, Langfuse's API never recorded."""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vcr
from vcr.cassette import Cassette
from vcr.errors import CannotOverwriteExistingCassetteException
from vcr.persisters.filesystem import FilesystemPersister
from vcr.record_mode import RecordMode

from templiqx_core import InvalidData, NotFound
from templiqx_core.adapters import load_document

from .._config import (
    ENV_LANGFUSE_PUBLIC_KEY,
    ENV_LANGFUSE_SECRET_KEY,
    ENV_MODEL_API_KEY,
    ENV_OPENAI_API_KEY,
)
from .._redaction import REDACTED, Redactor, live_redactors
from ._offline import offline

__all__ = [
    "LOOPBACK_REPLAY_HOST",
    "RECORD_MODES",
    "SCRUBBED_REQUEST_HEADERS",
    "SCRUBBED_RESPONSE_HEADERS",
    "ActiveCassette",
    "CassetteMiss",
    "Scrubber",
    "ScrubbingPersister",
    "UnplayedInteractions",
    "cassette_config",
    "cassette_miss",
    "check_cassette",
    "no_match_error",
    "open_cassette",
    "record_mode_of",
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
SECRET_ENV_VARS = (
    ENV_MODEL_API_KEY,
    ENV_OPENAI_API_KEY,
    ENV_LANGFUSE_PUBLIC_KEY,
    ENV_LANGFUSE_SECRET_KEY,
)
#: pytest-recording's ``--record-mode`` choices: vcrpy's modes plus ``rewrite``.
RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")
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
    """Removes secrets from text: the given values, keys in ``env`` (read each time), every
    live runtime's keys, credential shapes."""

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
        """``text`` of a str, bytes (binary as latin-1: ASCII secrets still match) or a list
        or tuple of them; any other value unchanged."""
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
        """vcrpy's ``before_record_request``, which it runs on live requests too: both sides
        of a match are scrubbed alike. Langfuse's spans and scores are never recorded."""
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
            if key in (response.get(part) or {}):
                response[part][key] = self.body(response[part][key])
        return response


def cassette_config(
    *,
    secrets: Iterable[str | None] = (),
    langfuse_hosts: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    scrubber: Scrubber | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``VCR.use_cassette`` / ``vcr_config``; no ``record_mode``, which
    there would override ``--record-mode``."""
    scrub = scrubber or Scrubber(secrets, env)
    return {
        # host names the recording server's random port: noise in every re-recording.
        "filter_headers": [*SCRUBBED_REQUEST_HEADERS, "host"],
        "before_record_request": scrub.request,
        "before_record_response": scrub.response,
        "decode_compressed_response": True,
        "match_on": ("method", "uri", "body"),
        "allow_playback_repeats": False,
        "ignore_hosts": [*_LANGFUSE_HOSTS, *langfuse_hosts],
        "record_on_exception": False,
    }


class ScrubbingPersister:
    """A vcrpy persister around ``inner``: it loads only what ``check_cassette`` passes (a
    missing cassette is ``NotFound`` when ``required``), and scrubs every interaction before
    ``inner`` writes it, so a host's ``before_record_*`` cannot let a secret through."""

    def __init__(self, inner: Any, scrubber: Scrubber, *, required: bool = False) -> None:
        self.inner, self.scrubber, self.required = inner, scrubber, required

    def load_cassette(self, cassette_path: str, serializer: Any) -> Any:
        check_cassette(Path(cassette_path), write_protected=self.required)
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
    """A cassette in use, the scrubber its recordings and misses go through, and the misses
    its replaying runtime met (the plugin fails the test with each, even if swallowed)."""

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
        if not count:
            return None
        return UnplayedInteractions(
            f"cassette {self.path}: {count} recorded interaction(s) unplayed "
            "(the code under test made fewer or other requests than were recorded)"
        )


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
    """vcrpy's miss as one ``CassetteMiss`` with vcrpy's reason and diff, scrubbed (``brief``:
    one line, no diff)."""
    cassette, sent = error.cassette, error.failed_request
    scrub = (scrubber or Scrubber()).text
    request = cassette.filter_request(sent) or sent
    mode = getattr(cassette.record_mode, "value", cassette.record_mode)
    asked = f"{request.method} {scrub(request.uri)}"
    if not Path(cassette.path).is_file():
        return CassetteMiss(
            f"cassette {cassette.path} does not exist (record mode {mode}), so nothing answers "
            f"{asked}: recording writes a cassette only when the test calls the model. "
            "Record it: pytest --record-mode=once"
        )
    head = f"cassette {cassette.path} (record mode {mode}) has no unplayed recorded response"
    head += f" for {asked}"
    if not len(cassette):
        return CassetteMiss(f"{head}; the cassette is empty. Record it: pytest --record-mode=once")
    failed = error.similar_requests[0][2] if error.reason == "no_match" else []
    reason = {
        "already_played": "its recorded twin was already played (an interaction plays once)",
        "no_match": f"closest recorded request differs in: {', '.join(n for n, _ in failed)}",
    }.get(error.reason, "no recorded request is similar to it")
    if [n for n, _ in failed] == ["body"]:  # JSON objects equal but for response_format?
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            old, new = (
                json.loads(b or b"") for b in (error.similar_requests[0][0].body, sent.body)
            )
            formats = old.pop("response_format", None), new.pop("response_format", None)
            reason += f"; {FORMAT_ONLY}" if old == new and formats[0] != formats[1] else ""
    if brief:
        return CassetteMiss(f"{head}; {reason} (TEMPLIQX_DEBUG=1 shows the difference)")
    lines = [head, reason]
    for name, message in failed:
        lines += [f"  {name}:", *(f"    {scrub(line)}" for line in (message or "").splitlines())]
    lines.append(
        "Re-record the cassette if the change is intended: pytest --record-mode=rewrite "
        "(pytest-recording), or vcrpy with record_mode='all'."
    )
    return CassetteMiss("\n".join(lines))


def record_mode_of(value: str | RecordMode) -> str:
    mode = value.value if isinstance(value, RecordMode) else value
    if mode not in RECORD_MODES:
        raise InvalidData(f"record mode must be one of {', '.join(RECORD_MODES)}")
    return mode


def check_cassette(path: Path, *, write_protected: bool) -> None:
    """Before vcrpy reads ``path``: a cassette that must replay exists (``NotFound``), and a
    file vcrpy could not replay is one ``InvalidData`` line (aliases bounded)."""
    if not path.is_file():
        if write_protected:
            raise NotFound(
                f"cassette {path} does not exist; record it (pytest --record-mode=once) "
                "or fix the path"
            )
        return
    data = load_document(path)  # aliases past the byte budget included, located
    interactions = data.get("interactions") if isinstance(data, dict) else None
    if not isinstance(interactions, list):
        raise InvalidData(f"{path}: not a cassette (no interactions list)")
    for index, item in enumerate(interactions):
        request = item.get("request") if isinstance(item, dict) else None
        if not (
            isinstance(request, dict)
            and set(request) == {"method", "uri", "body", "headers"}
            and isinstance(request["uri"], str)
            and isinstance(request["method"], str)
            and isinstance(item.get("response"), dict)
            and all(
                isinstance(item["response"].get(k), dict) for k in ("status", "headers", "body")
            )
        ):
            raise InvalidData(
                f"{path}: interactions[{index}] is not a recorded request/response pair"
            )


@contextmanager
def open_cassette(
    path: str | Path,
    *,
    record_mode: str | RecordMode = "none",
    secrets: Iterable[str | None] = (),
    env: Mapping[str, str] | None = None,
    ignore_hosts: Iterable[str] = (),
) -> Iterator[ActiveCassette]:
    """Use ``path`` with pytest-recording's record modes; only loopback connects while it
    replays. ``ignore_hosts``: calls that pass through, never recorded."""
    path, mode = Path(path), record_mode_of(record_mode)
    if mode == "rewrite":
        path.unlink(missing_ok=True)
        mode = "new_episodes"
    scrubber = Scrubber(secrets, env)
    config = cassette_config(scrubber=scrubber)
    config["ignore_hosts"] = [*config["ignore_hosts"], *ignore_hosts]
    persister = ScrubbingPersister(FilesystemPersister, scrubber, required=mode == "none")
    opened = vcr.VCR().use_cassette(str(path), record_mode=mode, persister=persister, **config)
    with opened as cassette:
        active = ActiveCassette(path, cassette, scrubber)
        with offline() if active.replaying else nullcontext():
            yield active


@contextmanager
def use_cassette(
    path: str | Path,
    *,
    record_mode: str = "none",
    secrets: Iterable[str | None] = (),
    require_all_played: bool = True,
) -> Iterator[Cassette]:
    """Replay (or record) ``path``; fail when a replay leaves interactions unplayed."""
    with open_cassette(path, record_mode=record_mode, secrets=secrets) as active:
        yield active.cassette
    if require_all_played and (error := active.unplayed_error()) is not None:
        raise error
