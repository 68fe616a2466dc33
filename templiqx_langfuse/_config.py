"""The model endpoint's and Langfuse's configuration, as frozen pydantic models: argument →
environment → default, as in the Langfuse SDK. A wrong type or value is ``InvalidData`` naming
the field, never the value (a misplaced key must not reach a log), at construction."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Mapping
from typing import Annotated, Any, ClassVar, Literal
from urllib.parse import SplitResult, unquote, urlsplit

import httpx
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from templiqx_core import InvalidData

ENV_MODEL_BASE_URL = "TEMPLIQX_MODEL_BASE_URL"  # …/v1; else OPENAI_BASE_URL, else the default
ENV_OPENAI_BASE_URL = "OPENAI_BASE_URL"
ENV_MODEL_API_KEY = "TEMPLIQX_MODEL_API_KEY"  # else OPENAI_API_KEY
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "TEMPLIQX_MODEL"  # the model id sent as ``model`` (required)
ENV_MODEL_TIMEOUT_S = "TEMPLIQX_MODEL_TIMEOUT_S"  # one round trip's whole deadline (60 s)
ENV_MODEL_MAX_CONNECTIONS = "TEMPLIQX_MODEL_MAX_CONNECTIONS"  # calls in flight per runtime/loop
ENV_MODEL_PROXY = "TEMPLIQX_MODEL_PROXY"  # HTTP(S)_PROXY/ALL_PROXY are not read
ENV_MODEL_STRICT = "TEMPLIQX_MODEL_STRICT"  # true, false or auto (the default)
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
# Langfuse's rule for environment names (the SDK enforces the same pattern; pydantic's
# regex engine has no look-ahead, so it is checked here).
_ENVIRONMENT = re.compile(r"^(?!langfuse)[a-z0-9_-]+$")


# Seconds as ASCII decimal text: float() would also take "١٢", "1_0", "inf" and "nan".
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]*)?|\.[0-9]+", re.ASCII)
_DIGITS = re.compile(r"[0-9]+", re.ASCII)
# What an HTTP header value can carry verbatim (keys travel in Authorization headers).
_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+", re.ASCII)
# Control characters, and lone surrogates (no UTF-8 encoder takes them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _parse_url(value: str) -> SplitResult:
    # urlsplit silently drops tabs and newlines, httpx refuses them at call time.
    if _CONTROL.search(value) or any(c.isspace() for c in value):
        raise ValueError("must not contain whitespace or control characters")
    try:
        parts = urlsplit(value)
        _ = parts.port  # urlsplit is lazy about ports: reading it raises on a malformed one
        httpx.URL(value)  # the parser the request will use (IDNA, ports, characters)
    except (ValueError, httpx.InvalidURL):
        raise ValueError("is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise ValueError("must use http:// or https://")
    if not parts.hostname:
        raise ValueError("must name a host")
    return parts


def _url(value: str) -> str:
    parts = _parse_url(value)
    if "@" in parts.netloc:  # even an empty user-info
        raise ValueError("must not contain user-info (put keys in their fields)")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise ValueError("must not contain a query or fragment")
    return value.rstrip("/")


def _proxy(value: SecretStr) -> SecretStr:  # a secret: its user-info is the proxy's auth
    parts = _parse_url(value.get_secret_value())
    if parts.path not in ("", "/") or parts.query or parts.fragment:
        raise ValueError("must be scheme://host[:port] only")
    return value


def proxy_secrets(proxy: SecretStr | None) -> tuple[str, ...]:
    """The credentials inside a proxy URL, for the redactor (raw and percent-decoded)."""
    if proxy is None:
        return ()
    parts = urlsplit(proxy.get_secret_value())
    userinfo = parts.netloc.rpartition("@")[0]
    found = {userinfo, unquote(userinfo)} if userinfo else set()
    if parts.password:
        found |= {parts.password, unquote(parts.password)}
    # The Proxy-Authorization value itself, which a 407 or the HTTP loggers may show.
    found |= {base64.b64encode(text.encode()).decode("ascii") for text in set(found) if ":" in text}
    return tuple(sorted(found))


def _texts(env: Mapping[str, str], fields: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    """The text fields set in ``env`` (field: its variables, the first one set wins)."""
    read: dict[str, str] = {}
    for name, variables in fields.items():
        if value := next((env[v] for v in variables if env.get(v)), None):
            read[name] = value
    return read


def _numbers(env: Mapping[str, str], fields: Mapping[str, tuple[str, type]]) -> dict[str, Any]:
    """The number variables set in ``env`` (variable: field, type), by field."""
    read: dict[str, Any] = {}
    for variable, (name, kind) in fields.items():
        if text := env.get(variable, "").strip():
            pattern, what = (_SECONDS, "a number") if kind is float else (_DIGITS, "a whole number")
            if not pattern.fullmatch(text):
                raise InvalidData(f"{variable} must be {what} (ASCII digits)")
            read[name] = kind(text)
    return read


def _clean(value: str) -> str:
    """Refuses what would fail every call as a *retryable* error (a key file's newline)."""
    if not value.strip():
        raise ValueError("must not be empty")
    if value != value.strip():
        raise ValueError("must not have leading or trailing whitespace")
    if _CONTROL.search(value):
        raise ValueError("must not contain control characters")
    return value


def _header(value: SecretStr) -> SecretStr:
    """Keys travel in headers, where httpx would raise with the value."""
    if not _HEADER_TOKEN.fullmatch(_clean(value.get_secret_value())):
        raise ValueError("must be printable ASCII without spaces")
    return value


def _sendable(value: str) -> str:
    """A lone surrogate has no UTF-8 form: every export would fail."""
    if any(0xD800 <= ord(c) < 0xE000 for c in value):
        raise ValueError("must be Unicode text that can be sent (it has a lone surrogate)")
    return value


def _environment(value: str) -> str:
    if not _ENVIRONMENT.fullmatch(value):
        raise ValueError("must be lowercase letters, digits, - or _ and not start with 'langfuse'")
    return value


def _strict_mode(value: object) -> object:
    if value is True or value is False or value == "auto":
        return value
    raise ValueError('must be true, false or "auto"')


def _key_text(value: object) -> object:
    if not isinstance(value, (str, SecretStr)):
        raise ValueError("must be a string")  # lax SecretStr would take bytes as text
    return value


Key = Annotated[SecretStr, BeforeValidator(_key_text), AfterValidator(_header)]
Text = Annotated[str, AfterValidator(_sendable)]
Name = Annotated[str, AfterValidator(_clean)]  # its control characters include surrogates
Seconds = Annotated[float, Field(gt=0, le=300)]


class _Config(BaseModel):
    """Frozen, strict (``"5"`` is not a number, ``True`` not a count), no unknown fields."""

    model_config = ConfigDict(
        frozen=True, strict=True, extra="forbid", allow_inf_nan=False, hide_input_in_errors=True
    )
    _prefix: ClassVar[str]

    @model_validator(mode="wrap")
    @classmethod
    def _refuse(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(data)
        except ValidationError as error:
            first = error.errors(include_input=False, include_url=False)[0]
            name = str(first["loc"][0]) if first["loc"] else "value"  # the field itself
            where = cls._prefix if name == cls._prefix else f"{cls._prefix} {name}"
            cause = first.get("ctx", {}).get("error")
            text = str(cause) if isinstance(cause, ValueError) else first["msg"]
            raise InvalidData(f"{where} {text[:1].lower()}{text[1:]}") from None


class ModelConfig(_Config):
    """The OpenAI-compatible endpoint; ``strict`` sets ``json_schema.strict`` (``"auto"``:
    strict when the output schema has a strict form)."""

    _prefix: ClassVar[str] = "model"
    base_url: Annotated[str, AfterValidator(_url)]
    api_key: Key = Field(strict=False)  # str or SecretStr, as hosts hold it
    model: Name
    timeout_s: float = Field(default=DEFAULT_TIMEOUT_S, gt=0, le=3600)
    strict: Annotated[bool | Literal["auto"], BeforeValidator(_strict_mode)] = "auto"
    proxy: Annotated[SecretStr, BeforeValidator(_key_text), AfterValidator(_proxy)] | None = Field(
        default=None, strict=False
    )
    max_connections: int = Field(default=DEFAULT_MAX_CONNECTIONS, ge=1, le=100_000)

    def secrets(self) -> tuple[str, ...]:
        """Every value of this configuration that must never leave in text."""
        return (self.api_key.get_secret_value(), *proxy_secrets(self.proxy))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ModelConfig:
        strict = env.get(ENV_MODEL_STRICT, "").strip().lower() or "auto"
        if strict not in ("true", "false", "auto"):
            raise InvalidData(f"{ENV_MODEL_STRICT} must be true, false or auto")
        variables = {
            "base_url": (ENV_MODEL_BASE_URL, ENV_OPENAI_BASE_URL),
            "api_key": (ENV_MODEL_API_KEY, ENV_OPENAI_API_KEY),
            "model": (ENV_MODEL,),
            "proxy": (ENV_MODEL_PROXY,),
        }
        read: dict[str, Any] = {"base_url": DEFAULT_MODEL_BASE_URL, **_texts(env, variables)}
        required = {"api_key": f"{ENV_MODEL_API_KEY} (or {ENV_OPENAI_API_KEY})", "model": ENV_MODEL}
        for name, named in required.items():
            if not read.get(name, "").strip():
                raise InvalidData(f"{named} must not be empty")
        numbers = {
            ENV_MODEL_TIMEOUT_S: ("timeout_s", float),
            ENV_MODEL_MAX_CONNECTIONS: ("max_connections", int),
        }
        read["strict"] = "auto" if strict == "auto" else strict == "true"
        return cls(**read, **_numbers(env, numbers))


class LangfuseConfig(_Config):
    """Langfuse project credentials and trace attributes. ``project_id`` only builds trace
    URLs locally (the SDK's ``get_trace_url`` makes a blocking HTTP call to learn it)."""

    _prefix: ClassVar[str] = "langfuse"
    public_key: Key | None = Field(default=None, strict=False)
    secret_key: Key | None = Field(default=None, strict=False)
    base_url: Annotated[str, AfterValidator(_url)] = DEFAULT_LANGFUSE_BASE_URL
    environment: Annotated[str, AfterValidator(_environment)] | None = None
    release: Text | None = None
    sample_rate: float | None = Field(default=None, ge=0, le=1)
    #: A path segment of trace URLs printed to terminals and logs.
    project_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,128}$")
    flush_timeout_s: Seconds = 5.0
    tags: tuple[Text, ...] = Field(default=(), strict=False)  # a list is fine
    session_id: Text | None = None
    user_id: Text | None = None
    flush_at: int = Field(default=512, ge=1, le=2048)  # OTel's batch size, as LANGFUSE_FLUSH_AT's
    flush_interval_s: float = Field(default=0.25, gt=0, le=60)
    schema_score_name: Name | None = "output_schema_valid"
    tracing: bool = True
    timeout_s: Seconds = 5.0
    mask: Callable[..., Any] | None = Field(default=None, repr=False)
    flush_on_sigterm: bool = False

    @property
    def enabled(self) -> bool:
        return bool(self.tracing and self.public_key and self.secret_key)

    def keys(self) -> tuple[str, str]:
        """The public and secret key as text ("" when unset)."""
        public, secret = (
            k.get_secret_value() if k else "" for k in (self.public_key, self.secret_key)
        )
        return public, secret

    def secrets(self) -> tuple[str, ...]:
        """The keys, for the redactor."""
        return tuple(key for key in self.keys() if key)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> LangfuseConfig:
        """From the langfuse SDK's variables, with its meaning; ``overrides`` win."""
        read: dict[str, Any] = _texts(
            env,
            {
                "public_key": (ENV_LANGFUSE_PUBLIC_KEY,),
                "secret_key": (ENV_LANGFUSE_SECRET_KEY,),
                "base_url": (ENV_LANGFUSE_BASE_URL, ENV_LANGFUSE_HOST),
                "project_id": (ENV_LANGFUSE_PROJECT_ID,),
                "environment": (ENV_LANGFUSE_TRACING_ENVIRONMENT,),
                "release": (ENV_LANGFUSE_RELEASE,),
            },
        )
        if env.get(ENV_LANGFUSE_TRACING_ENABLED, "").strip().lower() == "false":
            read["tracing"] = False
        numbers = {
            ENV_LANGFUSE_SAMPLE_RATE: ("sample_rate", float),
            ENV_LANGFUSE_FLUSH_AT: ("flush_at", int),
            ENV_LANGFUSE_FLUSH_INTERVAL: ("flush_interval_s", float),
            ENV_LANGFUSE_TIMEOUT: ("timeout_s", float),
        }
        read |= _numbers(env, numbers)
        return cls(**{**read, **overrides})

    def trace_url(self, trace_id: str) -> str | None:
        if self.project_id is None:
            return None
        return f"{self.base_url}/project/{self.project_id}/traces/{trace_id}"
