"""The model endpoint's and Langfuse's configuration as frozen pydantic models (argument, then
environment, then default); a wrong value is ``InvalidData`` naming the field, never the value."""

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
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidatorFunctionWrapHandler,
    model_validator,
)

from templiqx_core import InvalidData

from ._wire import _DECIMAL

ENV_MODEL_API_KEY = "TEMPLIQX_MODEL_API_KEY"
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"
ENV_LANGFUSE_PUBLIC_KEY = "LANGFUSE_PUBLIC_KEY"
ENV_LANGFUSE_SECRET_KEY = "LANGFUSE_SECRET_KEY"  # noqa: S105 - a variable name, not a secret
# Each field's variables, the first one set wins; HTTP(S)_PROXY/ALL_PROXY are not read.
MODEL_ENV = {
    "base_url": ("TEMPLIQX_MODEL_BASE_URL", "OPENAI_BASE_URL"),
    "api_key": (ENV_MODEL_API_KEY, ENV_OPENAI_API_KEY),
    "model": ("TEMPLIQX_MODEL",),
    "timeout_s": ("TEMPLIQX_MODEL_TIMEOUT_S",),
    "max_connections": ("TEMPLIQX_MODEL_MAX_CONNECTIONS",),
    "proxy": ("TEMPLIQX_MODEL_PROXY",),
    "strict": ("TEMPLIQX_MODEL_STRICT",),
}
# The langfuse SDK's own variables with its meaning (one environment configures both).
LANGFUSE_ENV = {
    "public_key": (ENV_LANGFUSE_PUBLIC_KEY,),
    "secret_key": (ENV_LANGFUSE_SECRET_KEY,),
    "base_url": ("LANGFUSE_BASE_URL", "LANGFUSE_HOST"),
    "project_id": ("LANGFUSE_PROJECT_ID",),
    "environment": ("LANGFUSE_TRACING_ENVIRONMENT",),
    "release": ("LANGFUSE_RELEASE",),
    "tracing": ("LANGFUSE_TRACING_ENABLED",),
    "sample_rate": ("LANGFUSE_SAMPLE_RATE",),
    "flush_at": ("LANGFUSE_FLUSH_AT",),
    "flush_interval_s": ("LANGFUSE_FLUSH_INTERVAL",),
    "timeout_s": ("LANGFUSE_TIMEOUT",),
}

_NUMBERS = {"timeout_s", "sample_rate", "flush_interval_s", "max_connections", "flush_at"}
_WORDS: dict[str, bool | str] = {"true": True, "false": False, "auto": "auto"}
# What an HTTP header value can carry verbatim (keys travel in Authorization headers).
_HEADER_TOKEN = re.compile(r"[\x21-\x7e]+", re.ASCII)
# Control characters, and lone surrogates (no UTF-8 encoder takes them).
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\ud800-\udfff]")


def _parse_url(value: str) -> SplitResult:
    try:
        if any(c.isspace() for c in value):  # urlsplit drops tabs and newlines silently
            raise ValueError
        parts = urlsplit(value)
        _ = parts.port  # urlsplit is lazy about ports: reading it raises on a malformed one
        httpx.URL(value)  # the parser the request will use (IDNA, control characters)
    except (ValueError, httpx.InvalidURL):
        raise ValueError("is not a valid URL") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be http:// or https:// and name a host")
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


def _from_env(env: Mapping[str, str], variables: Mapping[str, tuple[str, ...]]) -> dict[str, Any]:
    """The fields set in ``env``; a bad number or word names its variable."""
    read: dict[str, Any] = {}
    for name, names in variables.items():
        variable = next((v for v in names if env.get(v, "").strip()), None)
        if variable is None:
            continue
        text = env[variable].strip()
        if name in _NUMBERS:  # ASCII decimals: float() would also take "١٢", "1_0" and "inf"
            if not _DECIMAL.fullmatch(text):
                raise InvalidData(f"{variable} must be a number in ASCII digits")
            read[name] = int(text) if text.isdigit() else float(text)  # a count refuses 1.5
        elif name in ("strict", "tracing"):
            word = _WORDS.get(text.lower(), text)  # strict refuses any other word itself
            if name == "strict" or word is False:  # the SDK's: only "false" turns tracing off
                read[name] = word
        else:
            read[name] = env[variable]
    return read


def _clean(value: str) -> str:
    """Refuses what would fail every call as a *retryable* error (a key file's newline)."""
    if not value.strip() or value != value.strip() or _CONTROL.search(value):
        raise ValueError("must be text without surrounding whitespace or control characters")
    return value


def _header(value: SecretStr) -> SecretStr:
    """Keys travel in headers, where httpx would raise with the value."""
    if not _HEADER_TOKEN.fullmatch(value.get_secret_value()):
        raise ValueError("must be printable ASCII without spaces")
    return value


Key = Annotated[SecretStr, AfterValidator(_header)]
# A lone surrogate has no UTF-8 form: every export would fail.
Text = Annotated[str, Field(pattern=r"^[^\ud800-\udfff]*\Z")]
Name = Annotated[str, AfterValidator(_clean)]  # its control characters include surrogates
Seconds = Annotated[float, Field(gt=0, le=300)]


class _Config(BaseModel):
    """Frozen, strict (``"5"`` is not a number, ``True`` not a count), no unknown fields."""

    model_config = ConfigDict(
        frozen=True,
        strict=True,
        extra="forbid",
        hide_input_in_errors=True,
        regex_engine="python-re",  # look-ahead, for Langfuse's rule for environment names
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
    """The OpenAI-compatible endpoint; ``strict`` is ``json_schema.strict`` ("auto": if it can)."""

    _prefix: ClassVar[str] = "model"
    base_url: Annotated[str, AfterValidator(_url)]
    api_key: Key = Field(strict=False)  # str or SecretStr, as hosts hold it
    model: Name
    timeout_s: float = Field(default=60.0, gt=0, le=3600)
    strict: bool | Literal["auto"] = "auto"
    proxy: Annotated[SecretStr, AfterValidator(_proxy)] | None = Field(default=None, strict=False)
    # As AsyncOpenAI's: a burst of calls is not serialised behind a small pool.
    max_connections: int = Field(default=1000, ge=1, le=100_000)

    def secrets(self) -> tuple[str, ...]:
        """The key, and the proxy's credentials raw, percent-decoded and as the
        Proxy-Authorization value (a 407 or the HTTP loggers may show it)."""
        found: set[str] = set()
        if self.proxy is not None:
            parts = urlsplit(self.proxy.get_secret_value())
            userinfo = parts.netloc.rpartition("@")[0]
            found = {userinfo, unquote(userinfo)} if userinfo else set()
            if parts.password:
                found |= {parts.password, unquote(parts.password)}
            found |= {base64.b64encode(t.encode()).decode("ascii") for t in set(found) if ":" in t}
        return (self.api_key.get_secret_value(), *sorted(found))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ModelConfig:
        read = _from_env(env, MODEL_ENV)
        for name in ("api_key", "model"):
            if name not in read:
                raise InvalidData(f"{' or '.join(MODEL_ENV[name])} must be set (not empty)")
        return cls(**{"base_url": "https://api.openai.com/v1", **read})


class LangfuseConfig(_Config):
    """Langfuse project credentials and trace attributes. ``project_id`` only builds trace
    URLs locally (the SDK's ``get_trace_url`` makes a blocking HTTP call to learn it)."""

    _prefix: ClassVar[str] = "langfuse"
    public_key: Key | None = Field(default=None, strict=False)
    secret_key: Key | None = Field(default=None, strict=False)
    base_url: Annotated[str, AfterValidator(_url)] = "https://cloud.langfuse.com"
    environment: str | None = Field(default=None, pattern=r"^(?!langfuse)[a-z0-9_-]+\Z")
    release: Text | None = None
    sample_rate: float | None = Field(default=None, ge=0, le=1)
    #: A path segment of trace URLs printed to terminals and logs.
    project_id: str | None = Field(default=None, pattern=r"^[A-Za-z0-9_-]{1,128}\Z")
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
        public, secret = (self.public_key or SecretStr("")), (self.secret_key or SecretStr(""))
        return public.get_secret_value(), secret.get_secret_value()

    def secrets(self) -> tuple[str, ...]:
        return tuple(key for key in self.keys() if key)

    @classmethod
    def from_env(cls, env: Mapping[str, str], **overrides: Any) -> LangfuseConfig:
        """From the langfuse SDK's variables, with its meaning; ``overrides`` win."""
        return cls(**{**_from_env(env, LANGFUSE_ENV), **overrides})

    def trace_url(self, trace_id: str) -> str | None:
        if self.project_id is None:
            return None
        return f"{self.base_url}/project/{self.project_id}/traces/{trace_id}"
