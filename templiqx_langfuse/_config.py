"""Configuration of the model endpoint and of Langfuse tracing.

Precedence is argument → environment → default, as in the Langfuse SDK. Validation names
the offending field and never echoes a value: a misplaced key must not reach a log line.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import SplitResult, unquote, urlsplit

import httpx

from templiqx_core import InvalidData

ENV_MODEL_BASE_URL = "TEMPLIQX_MODEL_BASE_URL"  # …/v1; else OPENAI_BASE_URL, else the default
ENV_OPENAI_BASE_URL = "OPENAI_BASE_URL"
ENV_MODEL_API_KEY = "TEMPLIQX_MODEL_API_KEY"  # else OPENAI_API_KEY
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "TEMPLIQX_MODEL"  # the model id sent as ``model`` (required)
ENV_MODEL_TIMEOUT_S = "TEMPLIQX_MODEL_TIMEOUT_S"  # one round trip's whole deadline (60 s)
ENV_MODEL_MAX_CONNECTIONS = "TEMPLIQX_MODEL_MAX_CONNECTIONS"  # calls in flight per runtime/loop
ENV_MODEL_PROXY = "TEMPLIQX_MODEL_PROXY"  # HTTP(S)_PROXY/ALL_PROXY are not read
# The langfuse SDK's own variables (``langfuse._client.environment_variables``), read with
# its meaning: a host configures both through one environment.
ENV_LANGFUSE_PUBLIC_KEY = "LANGFUSE_PUBLIC_KEY"
ENV_LANGFUSE_SECRET_KEY = "LANGFUSE_SECRET_KEY"  # noqa: S105 - a variable name, not a secret
ENV_LANGFUSE_BASE_URL = "LANGFUSE_BASE_URL"  # else LANGFUSE_HOST, else Langfuse Cloud
ENV_LANGFUSE_HOST = "LANGFUSE_HOST"
ENV_LANGFUSE_TRACING_ENABLED = "LANGFUSE_TRACING_ENABLED"  # only ``false`` (any case) is off
ENV_LANGFUSE_SAMPLE_RATE = "LANGFUSE_SAMPLE_RATE"
ENV_LANGFUSE_TRACING_ENVIRONMENT = "LANGFUSE_TRACING_ENVIRONMENT"
ENV_LANGFUSE_RELEASE = "LANGFUSE_RELEASE"
ENV_LANGFUSE_FLUSH_AT = "LANGFUSE_FLUSH_AT"
ENV_LANGFUSE_FLUSH_INTERVAL = "LANGFUSE_FLUSH_INTERVAL"
ENV_LANGFUSE_TIMEOUT = "LANGFUSE_TIMEOUT"
ENV_LANGFUSE_PROJECT_ID = "LANGFUSE_PROJECT_ID"  # only for trace URLs built locally

DEFAULT_MODEL_BASE_URL = "https://api.openai.com/v1"
DEFAULT_LANGFUSE_BASE_URL = "https://cloud.langfuse.com"
DEFAULT_TIMEOUT_S = 60.0
#: As AsyncOpenAI's: a burst of calls is not serialised behind a small pool.
DEFAULT_MAX_CONNECTIONS = 1000
# Langfuse's rule for environment names (the SDK enforces the same pattern).
_ENVIRONMENT = re.compile(r"^(?!langfuse)[a-z0-9_-]+$")


# Seconds as ASCII decimal text: float() would also take "١٢", "1_0", "inf" and "nan".
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
# What an HTTP header value can carry verbatim (keys travel in Authorization headers).
_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+", re.ASCII)


def _has_control(value: str) -> bool:
    """Control characters, or lone surrogates (which no UTF-8 encoder accepts)."""
    return any(ord(c) < 0x20 or 0x7F <= ord(c) < 0xA0 or 0xD800 <= ord(c) < 0xE000 for c in value)


def _parse_url(value: object, field_name: str) -> SplitResult:
    """The parts of an ``http(s)://`` URL naming a host."""
    if not isinstance(value, str):
        raise InvalidData(f"{field_name} must be a string")
    # urlsplit silently drops tabs and newlines, httpx refuses them at call time.
    if _has_control(value) or any(c.isspace() for c in value):
        raise InvalidData(f"{field_name} must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        _ = parts.port  # urlsplit is lazy about ports: reading it raises on a malformed one
        httpx.URL(value)  # the parser the request will use (IDNA, ports, characters)
    except (ValueError, httpx.InvalidURL):
        raise InvalidData(f"{field_name} is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidData(f"{field_name} must use http:// or https://")
    if not parts.hostname:
        raise InvalidData(f"{field_name} must name a host")
    return parts


def validate_url(value: str, field_name: str) -> str:
    """An ``http(s)://host[:port][/path]`` URL without user-info, query or fragment."""
    parts = _parse_url(value, field_name)
    if "@" in parts.netloc:  # even an empty user-info
        raise InvalidData(f"{field_name} must not contain user-info (put keys in their fields)")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise InvalidData(f"{field_name} must not contain a query or fragment")
    return value.rstrip("/")


def validate_proxy(value: str, field_name: str) -> str:
    """An ``http(s)://[user:password@]host[:port]`` proxy URL (user-info is proxy auth)."""
    parts = _parse_url(value, field_name)
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise InvalidData(f"{field_name} must be scheme://host[:port] only")
    return value


def proxy_secrets(proxy: str | None) -> tuple[str, ...]:
    """The credentials inside a proxy URL, for the redactor (raw and percent-decoded)."""
    if proxy is None:
        return ()
    parts = urlsplit(proxy)
    userinfo = parts.netloc.rpartition("@")[0]
    found = {userinfo, unquote(userinfo)} if userinfo else set()
    if parts.password:
        found |= {parts.password, unquote(parts.password)}
    # The Proxy-Authorization value itself, which a 407 or the HTTP loggers may show.
    found |= {base64.b64encode(text.encode()).decode("ascii") for text in set(found) if ":" in text}
    return tuple(sorted(found))


def _sendable(value: object, field_name: str) -> None:
    """Refuse a string no export can carry (a lone surrogate has no UTF-8 form): every
    trace would fail to encode, for the process's whole life. ``None`` is unset."""
    if value is None:
        return
    if not isinstance(value, str):
        raise InvalidData(f"{field_name} must be a string")
    if any(0xD800 <= ord(c) < 0xE000 for c in value):
        raise InvalidData(
            f"{field_name} must be Unicode text that can be sent (it has a lone surrogate)"
        )


def _number_text(env: Mapping[str, str], variable: str, pattern: re.Pattern[str], what: str) -> str:
    """A number variable's text ("" when unset), refused unless ``pattern`` matches it."""
    text = env.get(variable, "").strip()
    if text and not pattern.fullmatch(text):
        raise InvalidData(f"{variable} must be {what} (ASCII digits)")
    return text


def _non_empty(value: str | None, field_name: str) -> str:
    if value is None or not value.strip():
        raise InvalidData(f"{field_name} must not be empty")
    return value


def _clean_text(value: object, field_name: str, *, header: bool = False) -> str:
    """Refuse what would fail every call later as a *retryable* error (a key read from a
    file ending in a newline). ``header`` values must be visible ASCII: httpx would raise
    with the value in the message."""
    if not isinstance(value, str):
        raise InvalidData(f"{field_name} must be a string")
    _non_empty(value, field_name)
    if value != value.strip():
        raise InvalidData(f"{field_name} must not have leading or trailing whitespace")
    if _has_control(value):
        raise InvalidData(f"{field_name} must not contain control characters")
    if header and not _HEADER_TOKEN.fullmatch(value):
        raise InvalidData(f"{field_name} must be printable ASCII without spaces")
    return value


@dataclass(frozen=True)
class ModelConfig:
    """The OpenAI-compatible endpoint. ``strict`` is sent as ``json_schema.strict``."""

    base_url: str
    api_key: str = field(repr=False)
    model: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    strict: bool = True
    proxy: str | None = field(default=None, repr=False)
    #: Calls in flight at once (the connection pool's size); a call beyond it waits for
    #: a free connection within its own deadline.
    max_connections: int = DEFAULT_MAX_CONNECTIONS

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", validate_url(self.base_url, "model base_url"))
        connections = self.max_connections
        if isinstance(connections, bool) or not isinstance(connections, int):
            raise InvalidData("model max_connections must be an integer")
        if not 1 <= connections <= 100_000:
            raise InvalidData("model max_connections must be in [1, 100000]")
        _clean_text(self.api_key, "model api_key", header=True)
        _clean_text(self.model, "model")
        # bool is an int: ``timeout_s=True`` would silently mean one second.
        if isinstance(self.timeout_s, bool) or not isinstance(self.timeout_s, (int, float)):
            raise InvalidData("model timeout_s must be a number of seconds")
        if not 0 < self.timeout_s <= 3600:  # also refuses NaN
            raise InvalidData("model timeout_s must be a number of seconds in (0, 3600]")
        if not isinstance(self.strict, bool):
            raise InvalidData("model strict must be true or false")
        if self.proxy is not None:
            validate_proxy(self.proxy, "model proxy")

    def secrets(self) -> tuple[str, ...]:
        """Every value of this configuration that must never leave in text."""
        return (self.api_key, *proxy_secrets(self.proxy))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ModelConfig:
        timeout = _number_text(env, ENV_MODEL_TIMEOUT_S, _SECONDS, "a number of seconds")
        connections = _number_text(env, ENV_MODEL_MAX_CONNECTIONS, _DIGITS, "a whole number")
        return cls(
            base_url=env.get(ENV_MODEL_BASE_URL)
            or env.get(ENV_OPENAI_BASE_URL)
            or DEFAULT_MODEL_BASE_URL,
            api_key=_non_empty(
                env.get(ENV_MODEL_API_KEY) or env.get(ENV_OPENAI_API_KEY),
                f"{ENV_MODEL_API_KEY} (or {ENV_OPENAI_API_KEY})",
            ),
            model=_non_empty(env.get(ENV_MODEL), ENV_MODEL),
            timeout_s=float(timeout) if timeout else DEFAULT_TIMEOUT_S,
            proxy=env.get(ENV_MODEL_PROXY) or None,
            max_connections=int(connections) if connections else DEFAULT_MAX_CONNECTIONS,
        )


_PROJECT_ID = re.compile(r"[A-Za-z0-9_-]{1,128}")


@dataclass(frozen=True)
class LangfuseConfig:
    """Langfuse project credentials and trace attributes. ``project_id`` only builds trace
    URLs locally (the SDK's ``get_trace_url`` makes a blocking HTTP call to learn it)."""

    public_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    base_url: str = DEFAULT_LANGFUSE_BASE_URL
    environment: str | None = None
    release: str | None = None
    sample_rate: float | None = None
    project_id: str | None = None
    flush_timeout_s: float = 5.0
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    user_id: str | None = None
    flush_at: int = 512  # OTel's batch size, as the SDK's LANGFUSE_FLUSH_AT default
    flush_interval_s: float = 0.25
    #: Name of the BOOLEAN score recording ``output_schema_valid`` per generation; None: off.
    schema_score_name: str | None = "output_schema_valid"
    #: False: trace nothing and send nothing to Langfuse, keys or not (an offline replay).
    #: The keys are still known, so they stay redacted from logs and cassettes.
    tracing: bool = True
    #: Seconds one request to Langfuse may take (``LANGFUSE_TIMEOUT``).
    timeout_s: float = 5.0
    #: The SDK's ``mask`` (``mask(data=...) -> masked``): applied to each generation's
    #: input, output and metadata before anything leaves the process. A mask that
    #: raises drops that field (logged once), never the call.
    mask: Callable[..., Any] | None = field(default=None, repr=False, compare=False)
    #: True: on SIGTERM, flush what is queued (within ``flush_timeout_s``), then hand the
    #: signal to the handler installed before (by default: the process ends of it; an
    #: ignored one stays ignored). Takes effect when the runtime is built on the main
    #: thread, as Python's signal API needs.
    flush_on_sigterm: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", validate_url(self.base_url, "langfuse base_url"))
        for name in ("public_key", "secret_key"):
            if getattr(self, name) is not None:
                _clean_text(getattr(self, name), f"langfuse {name}", header=True)
        if self.environment is not None and not _ENVIRONMENT.fullmatch(self.environment):
            raise InvalidData(
                "langfuse environment must be lowercase letters, digits, - or _ "
                "and must not start with 'langfuse'"
            )
        if self.project_id is not None and not (
            isinstance(self.project_id, str) and _PROJECT_ID.fullmatch(self.project_id)
        ):
            # It becomes a path segment of trace URLs printed to terminals and logs.
            raise InvalidData("langfuse project_id must be 1-128 ASCII letters, digits, - or _")
        if self.sample_rate is not None and not 0.0 <= self.sample_rate <= 1.0:
            raise InvalidData("langfuse sample_rate must be within [0, 1]")
        if self.mask is not None and not callable(self.mask):
            raise InvalidData("langfuse mask must be a function mask(*, data) -> masked data")
        for name in ("timeout_s", "flush_timeout_s"):
            if not 0 < getattr(self, name) <= 300:
                raise InvalidData(f"langfuse {name} must be within (0, 300]")
        if not 1 <= self.flush_at <= 2048 or not 0 < self.flush_interval_s <= 60:
            raise InvalidData("langfuse flush_at must be in [1, 2048], flush_interval_s in (0, 60]")
        if self.schema_score_name is not None and not self.schema_score_name.strip():
            raise InvalidData("langfuse schema_score_name must be a non-empty name or None")
        for name in ("environment", "release", "session_id", "user_id", "schema_score_name"):
            _sendable(getattr(self, name), f"langfuse {name}")
        if isinstance(self.tags, str) or not all(isinstance(t, str) for t in self.tags):
            raise InvalidData("langfuse tags must be a sequence of strings")
        for tag in self.tags:
            _sendable(tag, "langfuse tags")
        for name in ("tracing", "flush_on_sigterm"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidData(f"langfuse {name} must be true or false")

    @property
    def enabled(self) -> bool:
        return bool(self.tracing and self.public_key and self.secret_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> LangfuseConfig:
        """From the langfuse SDK's variables, with its meaning; ``overrides`` win."""
        read: dict[str, Any] = {
            "public_key": env.get(ENV_LANGFUSE_PUBLIC_KEY) or None,
            "secret_key": env.get(ENV_LANGFUSE_SECRET_KEY) or None,
            "base_url": env.get(ENV_LANGFUSE_BASE_URL)
            or env.get(ENV_LANGFUSE_HOST)
            or DEFAULT_LANGFUSE_BASE_URL,
            "project_id": env.get(ENV_LANGFUSE_PROJECT_ID) or None,
            "environment": env.get(ENV_LANGFUSE_TRACING_ENVIRONMENT) or None,
            "release": env.get(ENV_LANGFUSE_RELEASE) or None,
        }
        if env.get(ENV_LANGFUSE_TRACING_ENABLED, "").strip().lower() == "false":
            read["tracing"] = False
        for variable, name, kind in (
            (ENV_LANGFUSE_SAMPLE_RATE, "sample_rate", float),
            (ENV_LANGFUSE_FLUSH_AT, "flush_at", int),
            (ENV_LANGFUSE_FLUSH_INTERVAL, "flush_interval_s", float),
            (ENV_LANGFUSE_TIMEOUT, "timeout_s", float),
        ):
            pattern = _SECONDS if kind is float else _DIGITS
            if text := _number_text(env, variable, pattern, "a number"):
                read[name] = kind(text)
        return cls(**{**read, **overrides})

    def trace_url(self, trace_id: str) -> str | None:
        if self.project_id is None:
            return None
        return f"{self.base_url}/project/{self.project_id}/traces/{trace_id}"
