"""vcrpy rules for recording and replaying the adapter's model calls (SPEC §6).

Secrets are scrubbed before anything is written, whoever records: credential headers are
dropped, and the configured keys (from the environment, the runtime's configuration or a
``secrets=`` argument) and credential-shaped strings become ``[REDACTED]`` in request and
response bodies, the URI, every remaining header and the status reason. A loopback
server's random port is folded into one stable host so a recording replays anywhere;
matching is method + URI + body; playback never repeats an interaction; Langfuse's API
(spans, scores) is never recorded, on any host. The record mode
is *not* part of these rules: it belongs to the caller (pytest-recording's
``--record-mode``, or ``open_cassette(record_mode=…)``).
"""

from __future__ import annotations

import difflib
import json
import os
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import vcr
import yaml
from vcr.cassette import Cassette
from vcr.errors import CannotOverwriteExistingCassetteException
from vcr.record_mode import RecordMode

from templiqx_core import InvalidData, NotFound
from templiqx_core._loading import YamlDocumentError, compose_and_load

from .._config import (
    ENV_LANGFUSE_PUBLIC_KEY,
    ENV_LANGFUSE_SECRET_KEY,
    ENV_MODEL_API_KEY,
    ENV_OPENAI_API_KEY,
)
from .._redaction import _SHARED as _LIVE_RUNTIMES
from .._redaction import REDACTED, Redactor
from ._offline import offline

__all__ = [
    "LOOPBACK_REPLAY_HOST",
    "RECORD_MODES",
    "SCRUBBED_REQUEST_HEADERS",
    "SCRUBBED_RESPONSE_HEADERS",
    "ActiveCassette",
    "CassetteMiss",
    "Scrubber",
    "UnplayedInteractions",
    "cassette_config",
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
# Recordings against the loopback reference server use a random port; fold it into a
# stable, unresolvable host so cassettes replay anywhere (and can never hit the network).
LOOPBACK_REPLAY_HOST = "http://loopback.templiqx.invalid"
_LOOPBACK = re.compile(r"^http://(?:127\.0\.0\.1|localhost|\[::1\]):\d+")
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
_MAX_DIFF_LINES = 40


class UnplayedInteractions(AssertionError):
    """A replayed cassette still holds interactions no request asked for."""


class CassetteMiss(NotFound):
    """A request the cassette has no unplayed recorded answer for (``TQX_NOT_FOUND``)."""


class Scrubber:
    """Removes secrets from text: the given values, keys in ``env``, the keys of every live
    runtime (the redactors they register for log redaction), credential shapes.

    ``env`` is read each time (cheaply cached), so keys a test sets after the rules were
    built are still scrubbed.
    """

    def __init__(
        self, secrets: Iterable[str | None] = (), env: Mapping[str, str] | None = None
    ) -> None:
        self._fixed = tuple(s for s in secrets if s)
        self._env = env
        self._cache: tuple[tuple[str, ...], Redactor] | None = None

    def _redactor(self) -> Redactor:
        env = os.environ if self._env is None else self._env
        values = (*self._fixed, *(env.get(name) or "" for name in SECRET_ENV_VARS))
        if self._cache is None or self._cache[0] != values:
            self._cache = (values, Redactor(values))
        return self._cache[1]

    def text(self, value: str) -> str:
        value = self._redactor().text(value)
        for member in _LIVE_RUNTIMES.members():  # every live runtime's configured keys
            value = member.redactor.text(value)
        value = _AUTH_SCHEME.sub(lambda m: f"{m.group(1)} {REDACTED}", value)
        return _CREDENTIAL.sub(REDACTED, value)

    def body(self, value: bytes | str | None) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if not isinstance(value, bytes) or not value:
            return value
        try:
            text, encoding = value.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:  # binary: latin-1 maps bytes 1:1, ASCII secrets still match
            text, encoding = value.decode("latin-1"), "latin-1"
        scrubbed = self.text(text)
        return value if scrubbed == text else scrubbed.encode(encoding, "replace")


def cassette_config(
    *,
    secrets: Iterable[str | None] = (),
    langfuse_hosts: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Keyword arguments for ``VCR.use_cassette`` / pytest-recording's ``vcr_config``.

    No ``record_mode``: pytest-recording lets a ``record_mode`` in ``vcr_config`` win
    over ``--record-mode``, so a rule set that named one would disable the flag.
    """
    scrubber = Scrubber(secrets, env)

    def before_record_request(request: Any) -> Any:
        # vcrpy also runs this on every live request before matching, so whatever is
        # scrubbed here is scrubbed identically on both sides of a match.
        if _LANGFUSE_API.match(request.uri):
            return None  # Langfuse traffic (spans, scores) on any host: never recorded
        request.uri = scrubber.text(_LOOPBACK.sub(LOOPBACK_REPLAY_HOST, request.uri))
        request.body = scrubber.body(request.body)
        for name, value in list(request.headers.items()):
            request.headers[name] = scrubber.text(value)
        return request

    def before_record_response(response: dict[str, Any]) -> dict[str, Any]:
        status = response.get("status") or {}
        if isinstance(status.get("message"), str):
            status["message"] = scrubber.text(status["message"])
        headers = response.get("headers") or {}
        response["headers"] = {
            scrubber.text(name): [scrubber.text(str(v)) for v in _values(values)]
            for name, values in headers.items()
            if name.lower() not in SCRUBBED_RESPONSE_HEADERS
        }
        body = response.get("body") or {}
        if "string" in body:
            body["string"] = scrubber.body(body["string"])
        return response

    return {
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


def _values(values: Any) -> list[Any]:
    return list(values) if isinstance(values, (list, tuple)) else [values]


@dataclass
class ActiveCassette:
    """A cassette in use, with the requests it could not answer (for one clear failure)."""

    path: Path
    record_mode: RecordMode
    cassette: Cassette
    scrubber: Scrubber
    misses: list[Any] = field(default_factory=list)

    @property
    def replaying(self) -> bool:
        """Answering from a recording that may not grow (``none``, or ``once`` over a file)."""
        return bool(self.cassette.write_protected)

    def unplayed(self) -> int:
        if not self.replaying:
            return 0
        return len(self.cassette) - len(self.cassette.play_counts)

    def unplayed_error(self) -> UnplayedInteractions | None:
        count = self.unplayed()
        if not count:
            return None
        return UnplayedInteractions(
            f"cassette {self.path}: {count} recorded interaction(s) unplayed "
            "(the code under test made fewer or other requests than were recorded)"
        )

    def miss_error(self, index: int = 0, *, brief: bool = False) -> CassetteMiss:
        """The ``index``-th unanswered request, what the closest recording differs in
        (with the body diff, or on one line when ``brief``)."""
        request = self.misses[index]
        return CassetteMiss(_describe_miss(self.path, self.cassette, self.scrubber, request, brief))


def no_match_error(
    error: CannotOverwriteExistingCassetteException, *, brief: bool = False
) -> CassetteMiss:
    """The same clear error from vcrpy's own, for code that holds only the exception."""
    cassette = error.cassette
    # The class's method, not a watched instance's: describing a miss is not another miss.
    request = Cassette.filter_request(cassette, error.failed_request) or error.failed_request
    path = Path(cassette._path)
    return CassetteMiss(_describe_miss(path, cassette, Scrubber(), request, brief))


def _json_lines(body: Any) -> list[str]:
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else str(body or "")
    try:
        return json.dumps(json.loads(text), indent=1, sort_keys=True).splitlines()
    except ValueError:
        return text.splitlines()


def _differences(request: Any, recorded: Any) -> list[str]:
    fields = [("method", request.method, recorded.method), ("URI", request.uri, recorded.uri)]
    differing = [name for name, mine, theirs in fields if mine != theirs]
    if _json_lines(request.body) != _json_lines(recorded.body):
        differing.append("body")
    return differing


def _describe_miss(
    path: Path, cassette: Cassette, scrubber: Scrubber, request: Any, brief: bool = False
) -> str:
    """What the closest recording differs in; ``brief``: one line without the diff (the
    CLI's, where ``TEMPLIQX_DEBUG=1`` asks for the rest)."""
    scrub = scrubber.text
    mode = getattr(cassette.record_mode, "value", cassette.record_mode)
    head = (
        f"cassette {path} (record mode {mode}) has no unplayed "
        f"recorded response for {request.method} {scrub(request.uri)}"
    )
    recorded = list(cassette.requests)
    if not recorded:
        return f"{head}; the cassette is empty. Record it: pytest --record-mode=once"
    closest = min(recorded, key=lambda r: len(_differences(request, r)))
    differing = _differences(request, closest)
    if not differing:
        reason = "its recorded twin was already played (an interaction plays once)"
    else:
        reason = f"closest recorded request differs in: {', '.join(differing)}"
    if brief:
        return f"{head}; {reason} (TEMPLIQX_DEBUG=1 shows the difference)"
    lines = [head, reason]
    if differing:
        if closest.method != request.method:
            lines.append(f"  method: recorded {closest.method}, sent {request.method}")
        if closest.uri != request.uri:
            lines.append(f"  URI: recorded {scrub(closest.uri)}, sent {scrub(request.uri)}")
        if "body" in differing:
            diff = list(
                difflib.unified_diff(
                    _json_lines(closest.body),
                    _json_lines(request.body),
                    "recorded body",
                    "sent body",
                    n=1,
                    lineterm="",
                )
            )
            shown = diff[:_MAX_DIFF_LINES]
            lines += [f"  {scrub(line)}" for line in shown]
            if len(diff) > len(shown):
                lines.append(f"  … {len(diff) - len(shown)} more diff lines")
    lines.append(
        "Re-record the cassette if the change is intended: pytest --record-mode=rewrite "
        "(pytest-recording), or vcrpy with record_mode='all'."
    )
    return "\n".join(lines)


def _watch_misses(active: ActiveCassette) -> None:
    """Note every request the cassette refuses, whatever the caller does with the error.

    vcrpy's stubs ask ``filter_request`` exactly when a write-protected cassette has no
    match, right before raising; noting it there keeps the diagnosis even when the error
    is caught, wrapped or mapped on its way up (the runtime may turn it into a failure).
    """
    cassette = active.cassette
    original: Callable[[Any], Any] = cassette.filter_request

    def filter_request(request: Any) -> Any:
        filtered = original(request)
        if filtered and cassette.write_protected:
            active.misses.append(filtered)
        return filtered

    cassette.filter_request = filter_request


#: pytest-recording's ``--record-mode`` choices: vcrpy's modes plus ``rewrite``.
RECORD_MODES = ("once", "new_episodes", "none", "all", "rewrite")


def record_mode_of(value: str | RecordMode) -> str:
    mode = value.value if isinstance(value, RecordMode) else value
    if mode not in RECORD_MODES:
        raise InvalidData(f"record mode must be one of {', '.join(RECORD_MODES)}")
    return mode


_REQUEST_FIELDS = frozenset({"method", "uri", "body", "headers"})


def _check_cassette(path: Path) -> None:
    """Refuse a file vcrpy could not replay, as one ``InvalidData`` line, before vcrpy reads it.

    Loaded with the bounded loader (aliases cannot expand past a limit), then the shape vcrpy
    relies on: ``interactions``, a list of ``{request: {method, uri, body, headers}, response:
    {...}}`` mappings. vcrpy itself would raise ``KeyError``/``TypeError`` tracebacks.
    """
    try:
        data = compose_and_load(path.read_text(encoding="utf-8"))[1]
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidData(f"{path}: cassette cannot be read ({type(error).__name__})") from None
    except RecursionError:
        raise InvalidData(f"{path}: cassette nested too deeply to parse") from None
    except yaml.YAMLError as error:  # aliases past the byte budget included, located
        raise YamlDocumentError.of(str(path), error, "cassette is not valid YAML") from None
    interactions = data.get("interactions") if isinstance(data, dict) else None
    if not isinstance(interactions, list):
        raise InvalidData(f"{path}: not a cassette (no interactions list)")
    for index, item in enumerate(interactions):
        request = item.get("request") if isinstance(item, dict) else None
        response = item.get("response") if isinstance(item, dict) else None
        if (
            not isinstance(request, dict)
            or set(request) != _REQUEST_FIELDS
            or not isinstance(request["uri"], str)
            or not isinstance(request["method"], str)
            or not isinstance(response, dict)
            or not isinstance(response.get("status"), dict)
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
    """Use ``path`` with pytest-recording's record-mode semantics; offline while replaying.

    ``rewrite`` deletes the cassette and records it afresh (as pytest-recording does);
    ``none`` needs the file. While the cassette only replays, nothing but loopback can
    connect, so a forgotten re-record cannot reach a provider. ``ignore_hosts`` (vcrpy's):
    calls to them pass through, never recorded (an ASGI app under test, say).
    """
    path = Path(path)
    mode = record_mode_of(record_mode)
    if mode == "rewrite":
        path.unlink(missing_ok=True)
        mode = "new_episodes"
    if mode == "none" and not path.is_file():
        raise NotFound(
            f"cassette {path} does not exist; record it (pytest --record-mode=once) or fix the path"
        )
    if path.is_file():
        _check_cassette(path)
    config = cassette_config(secrets=secrets, env=env)
    config["ignore_hosts"] = [*config["ignore_hosts"], *ignore_hosts]
    with ExitStack() as stack:
        try:
            cassette = stack.enter_context(
                vcr.VCR().use_cassette(str(path), record_mode=mode, **config)
            )
        except (LookupError, TypeError, ValueError, AttributeError, yaml.YAMLError) as error:
            raise InvalidData(f"{path}: not a readable cassette ({type(error).__name__})") from None
        active = ActiveCassette(path, RecordMode(mode), cassette, Scrubber(secrets, env))
        _watch_misses(active)
        if active.replaying:
            stack.enter_context(offline())
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
    error = active.unplayed_error() if require_all_played else None
    if error is not None:
        raise error
