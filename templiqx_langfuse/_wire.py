"""The OpenAI-compatible wire format: request bodies, response parsing, failure mapping."""

from __future__ import annotations

import email.utils
import functools
import logging
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

from templiqx_core import (
    AdapterDescriptor,
    CompiledInteraction,
    InvalidData,
    OutputSchemaStrictError,
    RuntimeFailure,
    RuntimeFailureCode,
    RuntimeFailureError,
    StrictForm,
    to_strict_schema,
)

from ._redaction import Redactor

MAX_RESPONSE_BYTES = 2 * 1024 * 1024
FORWARDED_POLICY_KEYS = frozenset(
    {"temperature", "top_p", "seed", "stop", "presence_penalty", "frequency_penalty"}
    | {"max_tokens", "max_completion_tokens"}
)
EXTENSION_NAMESPACE = "openai."
# An extension setting these would switch the traced model, drop the schema or stream.
RESERVED_FIELDS = frozenset({"model", "messages", "response_format", "stream", "stream_options"})
_BAD_FINISH = frozenset({"length", "content_filter"})
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
# LiteLLM rewrites a quota error to a throttling one: only the message still tells them apart.
_QUOTA_MESSAGES = ("insufficient_quota", "exceeded your current quota")
# Retry hints, most precise first; LiteLLM re-sends the upstream's with a prefix.
_HINTS_MS = ("retry-after-ms", "x-retry-after-ms", "llm_provider-retry-after-ms")
_HINTS_S = ("retry-after", "llm_provider-retry-after")
MAX_REASON_BYTES = 1024  # of a provider's reason in a failure detail
# Escaped in a provider's reason: it must not drive a terminal or split a log line.
_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")

logger = logging.getLogger("templiqx_langfuse")
StrictMode = bool | Literal["auto"]


def invalid(detail: str) -> WireFailure:
    return WireFailure(RuntimeFailureCode.INVALID_RESPONSE, detail)


@dataclass(eq=False, repr=False)
class WireFailure(Exception):
    """A mapped failure before it is tied to an adapter (code, redaction-safe detail)."""

    code: RuntimeFailureCode
    detail: str
    retry_after_ms: int | None = None
    answer: str | None = None  # the model's text when it is not JSON (for a repair)
    reason: str = ""  # the provider's whole reason, whose bounded form is in detail

    def __post_init__(self) -> None:
        super().__init__(self.detail)

    def to_error(self, adapter: AdapterDescriptor, redactor: Redactor) -> RuntimeFailureError:
        # Redacted whole, then bounded: a secret cut at the bound would no longer match.
        answer = None if self.answer is None else redactor.text(self.answer)
        detail = self.detail
        if self.reason:
            whole = _bounded(redactor.text(self.reason))
            detail = detail.replace(_bounded(self.reason), whole, 1)
        failure = RuntimeFailure.for_adapter(
            adapter,
            self.code,
            redactor.text(detail),
            retry_after_ms=self.retry_after_ms,
            answer=answer,
        )
        return RuntimeFailureError(failure)


@dataclass(frozen=True)
class RequestBody:
    content: bytes
    model_parameters: dict[str, Any]
    ignored_policy_keys: list[str]
    #: The ``json_schema.strict`` value sent (what ``"auto"`` chose).
    strict: bool = True


@functools.lru_cache(maxsize=256)
def _strict_form(written: bytes) -> StrictForm:
    """Keyed by bytes: each compile builds a new schema object; converting costs far more."""
    return to_strict_schema(orjson.loads(written))


@functools.cache  # once per contract version and process
def _warn_not_strict(name: str, findings: str) -> None:
    logger.warning(
        "output schema of %s has no strict form: sent with strict: false (%s)", name, findings
    )


def _response_schema(interaction: CompiledInteraction, strict: StrictMode) -> tuple[Any, bool]:
    """The schema to send and its ``strict`` flag (``OutputSchemaStrictError`` before I/O)."""
    schema: Any = interaction.output_schema
    if strict is False:
        return schema, False
    try:
        form = _strict_form(orjson.dumps(schema))
    except (TypeError, orjson.JSONEncodeError):
        form = to_strict_schema(schema)  # the body's serialization names what fails
    if form.schema is not None:
        return form.schema, True
    name = f"{interaction.contract_id}@{interaction.contract_version}"
    if strict is True:
        raise OutputSchemaStrictError(form.blocking, f"output schema of {name}")
    _warn_not_strict(name, "; ".join(str(finding) for finding in form.blocking))
    return schema, False


def build_request_body(
    interaction: CompiledInteraction, *, model: str, strict: StrictMode
) -> RequestBody:
    """The chat-completions request, same interaction → same bytes (cassettes match on them);
    ``InvalidData`` before any I/O."""
    policy = interaction.runtime_policy
    forwarded = {key: policy[key] for key in sorted(policy) if key in FORWARDED_POLICY_KEYS}
    ignored = sorted(key for key in policy if key not in FORWARDED_POLICY_KEYS)
    extensions = interaction.extensions
    fields = {
        key.removeprefix(EXTENSION_NAMESPACE): extensions[key]
        for key in sorted(extensions)
        if key.startswith(EXTENSION_NAMESPACE)
    }
    if reserved := sorted(RESERVED_FIELDS & fields.keys()):
        raise InvalidData(
            f"extension {EXTENSION_NAMESPACE}{reserved[0]} is reserved (the adapter's)"
        )
    schema, strict_sent = _response_schema(interaction, strict)
    body: dict[str, Any] = {
        **forwarded,
        **fields,
        "model": model,
        "messages": [{"role": m.role, "content": m.content} for m in interaction.messages],
        "response_format": {
            "type": "json_schema",
            "json_schema": {"name": "templiqx_output", "strict": strict_sent, "schema": schema},
        },
    }
    try:
        content = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except (TypeError, orjson.JSONEncodeError) as error:
        raise InvalidData(f"request cannot be sent as JSON ({error})") from None
    return RequestBody(content, forwarded, ignored, strict_sent)


_DECIMAL = re.compile(r"[0-9]+(\.[0-9]*)?|\.[0-9]+")
_U64_MAX = 2**64 - 1  # retry_after_ms is a u64 in the reference's receipts


def parse_retry_after_ms(headers: Mapping[str, str], *, now: float | None = None) -> int | None:
    """The hint in ms: a ``*-ms`` header, else ``retry-after`` (seconds or an HTTP date)."""
    for names, scale in ((_HINTS_MS, 1), (_HINTS_S, 1000)):
        for name in names:
            text = headers.get(name, "").strip()
            if _DECIMAL.fullmatch(text):  # ASCII digits: float() also reads "1_0", "1e3", "inf"
                return int(min(float(text) * scale, _U64_MAX))  # int(inf) would raise
    for name in _HINTS_S:
        try:
            when = email.utils.parsedate_to_datetime(headers.get(name, "").strip())
        except (TypeError, ValueError, IndexError, OverflowError):  # a year past C's long
            continue
        if when.tzinfo is not None:
            delta = when.timestamp() - (time.time() if now is None else now)
            return max(0, int(delta * 1000))
    return None


def _bounded(text: str) -> str:
    encoded = text.encode("utf-8", "surrogatepass")
    if len(encoded) > MAX_REASON_BYTES:
        text = encoded[: MAX_REASON_BYTES - 3].decode("utf-8", "ignore") + "..."
    return text


def _escaped(text: str) -> str:
    return _UNSAFE.sub(lambda found: f"\\u{ord(found[0]):04x}", text)


def _whole_reason(error: Mapping[str, Any]) -> str:
    """The provider's reason, unbounded (``to_error`` redacts it whole, then bounds it)."""
    parts = [
        f"{key}={_escaped(str(value))}"
        for key in ("message", "type", "param", "code")
        if isinstance(value := error.get(key), (str, int))
        and not isinstance(value, bool)
        and str(value)
    ]
    if not parts:
        return ""
    param, message = error.get("param"), error.get("message")
    schema = (isinstance(param, str) and param.startswith("response_format")) or (
        isinstance(message, str) and "response_format" in message
    )
    return ("the provider refused the output schema; " if schema else "") + "; ".join(parts)


def failure_for_status(status: int, headers: Mapping[str, str], body: bytes) -> WireFailure | None:
    """A non-2xx status (with its retry hints) as a failure; None for 2xx."""
    if 200 <= status < 300:
        return None
    try:
        data = orjson.loads(body or b"{}")
    except orjson.JSONDecodeError:
        data = None
    found = data.get("error") if isinstance(data, dict) else None
    error: dict[str, Any] = found if isinstance(found, dict) else {}
    whole = _whole_reason(error)
    reason = _bounded(whole)
    detail = f"model gateway returned HTTP {status}" + (f": {reason}" if reason else "")
    message = error.get("message")
    code, hint = RuntimeFailureCode.PERMANENT, None
    if status == 429:
        codes = (error.get("code"), error.get("type"))  # any JSON: a list is unhashable
        if any(isinstance(c, str) and c in _QUOTA_CODES for c in codes) or (
            isinstance(message, str) and any(m in message.lower() for m in _QUOTA_MESSAGES)
        ):
            detail += " (quota exhausted)"
        else:
            code, hint = RuntimeFailureCode.RATE_LIMITED, parse_retry_after_ms(headers)
    elif status == 408:
        code = RuntimeFailureCode.TIMEOUT
    elif status >= 500:
        code, hint = RuntimeFailureCode.UNAVAILABLE, parse_retry_after_ms(headers)
    return WireFailure(code, detail, hint, reason=whole)


@dataclass(frozen=True)
class Completion:
    """What one chat completion yields: the output for the receipt, the rest for the trace."""

    output: Any
    finish_reason: str | None = None
    response_id: str | None = None
    provider_model: str | None = None
    usage: dict[str, int] = field(default_factory=dict)


def usage_details(usage: Any) -> dict[str, int]:
    """Langfuse ``UsageDetails`` as its server normalises them (each key priced: no double bill)."""
    if not isinstance(usage, dict):
        return {}

    def count(value: Any) -> bool:
        return isinstance(value, int) and not isinstance(value, bool) and value >= 0

    sources = {"input": "prompt_tokens", "output": "completion_tokens", "total": "total_tokens"}
    details = {key: usage[source] for key, source in sources.items() if count(usage.get(source))}
    for side in ("input", "output"):
        parts = usage.get(f"{sources[side]}_details")
        for key, value in parts.items() if isinstance(parts, dict) else ():
            if count(value) and isinstance(key, str):
                details[f"{side}_{key}"] = value
                if side in details:
                    details[side] = max(details[side] - value, 0)
    return details


@dataclass(frozen=True)
class Usage:
    """The tokens one call used, as reported (``input_tokens`` includes ``cached_tokens``);
    ``details`` is the normalised form the generation carries in Langfuse."""

    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    cached_tokens: int | None
    reasoning_tokens: int | None
    details: Mapping[str, int] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, details: Mapping[str, int]) -> Usage | None:
        if not details:
            return None

        def side(name: str) -> int | None:
            parts = [v for k, v in details.items() if k == name or k.startswith(f"{name}_")]
            return sum(parts) if parts else None

        return cls(
            input_tokens=side("input"),
            output_tokens=side("output"),
            total_tokens=details.get("total"),
            cached_tokens=details.get("input_cached_tokens"),
            reasoning_tokens=details.get("output_reasoning_tokens"),
            details=dict(details),
        )


def parse_completion(body: bytes) -> Completion:
    """Parse a 2xx chat-completions body into its JSON output, or raise ``WireFailure``."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        raise invalid("response body is not JSON") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    choice = choices[0] if isinstance(choices, list) and choices else None
    message = choice.get("message") if isinstance(choice, dict) else None
    if not isinstance(data, dict) or not isinstance(choice, dict) or not isinstance(message, dict):
        raise invalid("response body is not a chat completion (no choices[0].message)")
    finish_reason = _text(choice.get("finish_reason"))
    if isinstance(refusal := message.get("refusal"), str) and refusal:
        raise invalid("model refused (message.refusal is set)")
    if finish_reason in _BAD_FINISH:
        raise invalid(f"model stopped with finish_reason {finish_reason}")
    content = message.get("content")
    if content is None or content == "":
        calls = " (the model returned tool_calls)" if message.get("tool_calls") else ""
        raise invalid(f"message content is empty{calls}")
    if _is_parts(content):  # Mistral's list of typed parts: the text parts are the answer
        content = "".join(p["text"] for p in content if p["type"] == "text")
    if isinstance(content, (dict, list)):
        output = content  # some gateways (Cloudflare) return the JSON already parsed
    elif isinstance(content, str):
        try:
            output = orjson.loads(content)
        except orjson.JSONDecodeError:
            detail = "message content is not JSON"  # the answer itself: the port's to repair
            raise WireFailure(RuntimeFailureCode.INVALID_RESPONSE, detail, answer=content) from None
    else:
        raise invalid("message content is not a string")
    return Completion(
        output=output,
        finish_reason=finish_reason,
        response_id=_text(data.get("id")),
        provider_model=_text(data.get("model")),
        usage=usage_details(data.get("usage")),
    )


def _is_parts(content: Any) -> bool:
    """Typed parts (``[{"type": "text", "text": ...}, ...]``), not an answer parsed to a list."""
    return (
        isinstance(content, list)
        and bool(content)
        and all(isinstance(p, dict) and isinstance(p.get("type"), str) for p in content)
        and any(p["type"] == "text" for p in content)
        and all(isinstance(p.get("text"), str) for p in content if p["type"] == "text")
    )


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None
