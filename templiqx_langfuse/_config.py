"""Configuration of the model endpoint and of Langfuse tracing (SPEC §5.1).

Precedence is argument → environment → default, as in the Langfuse SDK. Validation
names the offending field and never echoes a value: a misplaced key must not end up in
a log line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from templiqx_core import InvalidData

__all__ = [
    "DEFAULT_LANGFUSE_BASE_URL",
    "DEFAULT_MODEL_BASE_URL",
    "DEFAULT_TIMEOUT_S",
    "ENV_LANGFUSE_BASE_URL",
    "ENV_LANGFUSE_HOST",
    "ENV_LANGFUSE_PROJECT_ID",
    "ENV_LANGFUSE_PUBLIC_KEY",
    "ENV_LANGFUSE_SECRET_KEY",
    "ENV_MODEL",
    "ENV_MODEL_API_KEY",
    "ENV_MODEL_BASE_URL",
    "ENV_MODEL_TIMEOUT_S",
    "ENV_OPENAI_API_KEY",
    "ENV_OPENAI_BASE_URL",
    "LangfuseConfig",
    "ModelConfig",
]

ENV_MODEL_BASE_URL = "TEMPLIQX_MODEL_BASE_URL"
"""Model endpoint base URL (…/v1). Falls back to ``OPENAI_BASE_URL``, then the default."""
ENV_OPENAI_BASE_URL = "OPENAI_BASE_URL"
ENV_MODEL_API_KEY = "TEMPLIQX_MODEL_API_KEY"
"""Model API key. Falls back to ``OPENAI_API_KEY``."""
ENV_OPENAI_API_KEY = "OPENAI_API_KEY"
ENV_MODEL = "TEMPLIQX_MODEL"
"""Model id sent as ``model`` (required)."""
ENV_MODEL_TIMEOUT_S = "TEMPLIQX_MODEL_TIMEOUT_S"
"""Total wall-clock deadline of one round trip, in seconds (default 60)."""
ENV_LANGFUSE_PUBLIC_KEY = "LANGFUSE_PUBLIC_KEY"
ENV_LANGFUSE_SECRET_KEY = "LANGFUSE_SECRET_KEY"  # noqa: S105 - a variable name, not a secret
ENV_LANGFUSE_BASE_URL = "LANGFUSE_BASE_URL"
"""Langfuse base URL. Falls back to ``LANGFUSE_HOST``, then Langfuse Cloud."""
ENV_LANGFUSE_HOST = "LANGFUSE_HOST"
ENV_LANGFUSE_PROJECT_ID = "LANGFUSE_PROJECT_ID"
"""Langfuse project id: only used to build trace URLs locally (the CLI prints them)."""

DEFAULT_MODEL_BASE_URL = "https://api.openai.com/v1"
DEFAULT_LANGFUSE_BASE_URL = "https://cloud.langfuse.com"
DEFAULT_TIMEOUT_S = 60.0
# Langfuse's rule for environment names (the SDK enforces the same pattern).
_ENVIRONMENT = re.compile(r"^(?!langfuse)[a-z0-9_-]+$")


def validate_url(value: str, field_name: str) -> str:
    """An ``http(s)://host[:port][/path]`` URL without user-info, query or fragment."""
    try:
        parts = urlsplit(value)
        _ = parts.port  # urlsplit is lazy about ports: reading it raises on a malformed one
    except ValueError:
        raise InvalidData(f"{field_name} is not a valid URL") from None
    if parts.scheme not in ("http", "https"):
        raise InvalidData(f"{field_name} must use http:// or https://")
    if not parts.hostname:
        raise InvalidData(f"{field_name} must name a host")
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise InvalidData(f"{field_name} must not contain user-info (put keys in their fields)")
    if parts.query or parts.fragment or value.endswith(("?", "#")):
        raise InvalidData(f"{field_name} must not contain a query or fragment")
    return value.rstrip("/")


def _non_empty(value: str | None, field_name: str) -> str:
    if value is None or not value.strip():
        raise InvalidData(f"{field_name} must not be empty")
    return value


@dataclass(frozen=True)
class ModelConfig:
    """The OpenAI-compatible endpoint. ``strict`` is sent as ``json_schema.strict``."""

    base_url: str
    api_key: str = field(repr=False)
    model: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    strict: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", validate_url(self.base_url, "model base_url"))
        _non_empty(self.api_key, "model api_key")
        _non_empty(self.model, "model")
        if not (isinstance(self.timeout_s, (int, float)) and 0 < self.timeout_s <= 3600):
            raise InvalidData("model timeout_s must be a number of seconds in (0, 3600]")

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> ModelConfig:
        timeout_text = env.get(ENV_MODEL_TIMEOUT_S, "").strip()
        try:
            timeout = float(timeout_text) if timeout_text else DEFAULT_TIMEOUT_S
        except ValueError:
            raise InvalidData(f"{ENV_MODEL_TIMEOUT_S} must be a number of seconds") from None
        return cls(
            base_url=env.get(ENV_MODEL_BASE_URL)
            or env.get(ENV_OPENAI_BASE_URL)
            or DEFAULT_MODEL_BASE_URL,
            api_key=_non_empty(
                env.get(ENV_MODEL_API_KEY) or env.get(ENV_OPENAI_API_KEY),
                f"{ENV_MODEL_API_KEY} (or {ENV_OPENAI_API_KEY})",
            ),
            model=_non_empty(env.get(ENV_MODEL), ENV_MODEL),
            timeout_s=timeout,
        )


@dataclass(frozen=True)
class LangfuseConfig:
    """Langfuse project credentials and trace attributes.

    ``project_id`` is optional and only used to build trace URLs locally (the SDK's
    ``get_trace_url`` does a blocking HTTP call to learn it).
    """

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
    flush_at: int = 16
    flush_interval_s: float = 0.25
    #: Name of the BOOLEAN score recording ``output_schema_valid`` per generation; None: off.
    schema_score_name: str | None = "output_schema_valid"

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", validate_url(self.base_url, "langfuse base_url"))
        if self.environment is not None and not _ENVIRONMENT.fullmatch(self.environment):
            raise InvalidData(
                "langfuse environment must be lowercase letters, digits, - or _ "
                "and must not start with 'langfuse'"
            )
        if self.sample_rate is not None and not 0.0 <= self.sample_rate <= 1.0:
            raise InvalidData("langfuse sample_rate must be within [0, 1]")
        if not 0 < self.flush_timeout_s <= 300:
            raise InvalidData("langfuse flush_timeout_s must be within (0, 300]")
        if not 1 <= self.flush_at <= 2048 or not 0 < self.flush_interval_s <= 60:
            raise InvalidData("langfuse flush_at must be in [1, 2048], flush_interval_s in (0, 60]")
        if self.schema_score_name is not None and not self.schema_score_name.strip():
            raise InvalidData("langfuse schema_score_name must be a non-empty name or None")

    @property
    def enabled(self) -> bool:
        return bool(self.public_key and self.secret_key)

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> LangfuseConfig:
        return cls(
            public_key=env.get(ENV_LANGFUSE_PUBLIC_KEY) or None,
            secret_key=env.get(ENV_LANGFUSE_SECRET_KEY) or None,
            base_url=env.get(ENV_LANGFUSE_BASE_URL)
            or env.get(ENV_LANGFUSE_HOST)
            or DEFAULT_LANGFUSE_BASE_URL,
            project_id=env.get(ENV_LANGFUSE_PROJECT_ID) or None,
        )

    def trace_url(self, trace_id: str) -> str | None:
        if self.project_id is None:
            return None
        return f"{self.base_url}/project/{self.project_id}/traces/{trace_id}"
