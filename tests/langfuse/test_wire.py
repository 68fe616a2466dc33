"""Request building, response parsing and failure mapping: pure functions, no sockets."""

from __future__ import annotations

import email.utils
import json
from pathlib import Path
from typing import Any

import pytest

from templiqx_core import CompiledInteraction, RuntimeFailureCode
from templiqx_langfuse._wire import (
    MAX_REASON_BYTES,
    WireFailure,
    build_request_body,
    failure_for_status,
    parse_completion,
    parse_retry_after_ms,
    usage_details,
)
from tests.conftest import REPO_ROOT
from tests.loopback import chat_completion

INVALID = RuntimeFailureCode.INVALID_RESPONSE


def test_request_body_is_exact(greeting: CompiledInteraction) -> None:
    body = build_request_body(greeting, model="gpt-test", strict=True)
    assert json.loads(body.content) == {
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "You write concise greetings."},
            {"role": "user", "content": "Hello Ryan for Blinqx"},
        ],
        "response_format": {
            "type": "json_schema",
            "json_schema": {
                "name": "templiqx_output",
                "strict": True,
                "schema": greeting.output_schema,
            },
        },
        "temperature": 0,
    }
    assert body.model_parameters == {"temperature": 0}
    assert body.ignored_policy_keys == []


def test_request_body_validates_against_the_openai_schema(
    greeting: CompiledInteraction, reference_dir: Path
) -> None:
    import jsonschema

    schema = json.loads(
        (
            reference_dir / "corpus" / "openai-spec" / "CreateChatCompletionRequest.schema.json"
        ).read_text()
    )
    body = json.loads(build_request_body(greeting, model="gpt-4o-mini", strict=False).content)
    jsonschema.validate(body, schema)


def test_policy_keys_and_openai_extensions(greeting: CompiledInteraction) -> None:
    interaction = greeting.model_copy(
        update={
            "runtime_policy": {
                "temperature": 0.2,
                "seed": 7,
                "stop": ["\n"],
                "retries": 3,
                "max_completion_tokens": 100,
                "cache": True,
            },
            "extensions": {"openai.reasoning_effort": "low", "anthropic.thinking": True},
        }
    )
    body = build_request_body(interaction, model="m", strict=False)
    data = json.loads(body.content)
    assert data["reasoning_effort"] == "low"
    assert "thinking" not in data
    assert "anthropic.thinking" not in data
    assert data["response_format"]["json_schema"]["strict"] is False
    assert {k: data[k] for k in ("temperature", "seed", "stop", "max_completion_tokens")} == {
        "temperature": 0.2,
        "seed": 7,
        "stop": ["\n"],
        "max_completion_tokens": 100,
    }
    assert body.ignored_policy_keys == ["cache", "retries"]
    assert "retries" not in data


def test_body_bytes_are_deterministic(greeting: CompiledInteraction) -> None:
    reordered = greeting.model_copy(
        update={
            "runtime_policy": {"top_p": 1, "temperature": 0},
            "output_schema": dict(reversed(list(greeting.output_schema.items()))),
        }  # type: ignore[union-attr]
    )
    first = build_request_body(reordered, model="m", strict=True).content
    assert (
        first
        == build_request_body(
            greeting.model_copy(update={"runtime_policy": {"temperature": 0, "top_p": 1}}),
            model="m",
            strict=True,
        ).content
    )


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "660"}, 660),
        ({"x-retry-after-ms": "1500.7"}, 1500),
        ({"retry-after": "2"}, 2000),
        ({"retry-after": "0.5"}, 500),
        ({"retry-after": ".5"}, 500),  # as openai-python reads it (float())
        ({"retry-after": "."}, None),
        ({"retry-after-ms": "bogus", "retry-after": "3"}, 3000),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-4"}, None),
        ({"retry-after": "\u0665"}, None),  # an Arabic-Indic 5: float() reads it, HTTP does not
        ({"retry-after": "1_000"}, None),
        ({"retry-after": "1e3"}, None),
        ({"retry-after": "9" * 40}, 2**64 - 1),  # what the reference's u64 holds, at most
        ({"retry-after": "9" * 400}, 2**64 - 1),  # past float's range: capped, no OverflowError
        ({"retry-after-ms": "9" * 400}, 2**64 - 1),
        ({}, None),
    ],
)
def test_retry_after_parsing(headers: dict[str, str], expected: int | None) -> None:
    assert parse_retry_after_ms(headers) == expected


def test_retry_after_http_date() -> None:
    now = 1_800_000_000.0
    header = email.utils.formatdate(now + 30, usegmt=True)
    assert parse_retry_after_ms({"retry-after": header}, now=now) == 30_000
    past = email.utils.formatdate(now - 30, usegmt=True)
    assert parse_retry_after_ms({"retry-after": past}, now=now) == 0


@pytest.mark.parametrize(
    "date",
    [
        "Mon, 01 Jan 99999999999999999999 00:00:00 GMT",  # a year past C's long
        "Mon, 01 Jan 2030 00:00:00 +99999999999999999999",  # an offset past C's int
    ],
)
def test_an_http_date_out_of_range_is_no_hint_and_the_429_stays_a_rate_limit(date: str) -> None:
    for name in ("retry-after", "llm_provider-retry-after"):
        assert parse_retry_after_ms({name: date}) is None
    failure = failure_for_status(429, {"retry-after": date}, b"")
    assert failure is not None
    assert failure.code == RuntimeFailureCode.RATE_LIMITED


@pytest.mark.parametrize(
    ("status", "headers", "body", "code", "retry"),
    [
        (429, {"retry-after-ms": "250"}, b"{}", RuntimeFailureCode.RATE_LIMITED, 250),
        (429, {}, b'{"error":{"code":"insufficient_quota"}}', RuntimeFailureCode.PERMANENT, None),
        # Any JSON as the code or type (unhashable) is still a rate limit, not a TypeError.
        (429, {}, b'{"error":{"code":["x"],"type":{}}}', RuntimeFailureCode.RATE_LIMITED, None),
        (408, {}, b"", RuntimeFailureCode.TIMEOUT, None),
        (500, {}, b"", RuntimeFailureCode.UNAVAILABLE, None),
        (503, {"retry-after": "1"}, b"busy", RuntimeFailureCode.UNAVAILABLE, 1000),
        (400, {}, b"", RuntimeFailureCode.PERMANENT, None),
        (401, {}, b"", RuntimeFailureCode.PERMANENT, None),
        (404, {}, b"", RuntimeFailureCode.PERMANENT, None),
    ],
)
def test_status_mapping(
    status: int, headers: dict[str, str], body: bytes, code: RuntimeFailureCode, retry: int | None
) -> None:
    failure = failure_for_status(status, headers, body)
    assert failure is not None
    assert (failure.code, failure.retry_after_ms) == (code, retry)
    assert f"HTTP {status}" in failure.detail
    assert failure_for_status(200, headers, body) is None


def test_status_detail_carries_the_providers_own_reason() -> None:
    body = REPO_ROOT / "reference" / "corpus" / "provider-responses" / "chat-completions"
    entry = json.loads((body / "openai-400-strict-tool-invalid-schema.json").read_text())
    failure = failure_for_status(400, {}, json.dumps(entry["response"]["body"]).encode())
    assert failure is not None
    assert failure.code == RuntimeFailureCode.PERMANENT
    assert failure.detail == (
        "model gateway returned HTTP 400: message=Invalid schema for function "
        "'get_current_weather': In context=(), 'additionalProperties' is required to be "
        "supplied and to be false.; type=invalid_request_error; "
        "param=tools[0].function.parameters; code=invalid_function_parameters"
    )


@pytest.mark.parametrize(
    ("error", "says_schema"),
    [
        ({"message": "bad", "param": "response_format.json_schema.schema"}, True),
        ({"message": "Invalid schema for response_format 'templiqx_output'"}, True),
        ({"message": "bad", "param": "messages[0]"}, False),
    ],
)
def test_a_refused_output_schema_is_said_so(error: dict[str, Any], says_schema: bool) -> None:
    failure = failure_for_status(400, {}, json.dumps({"error": error}).encode())
    assert failure is not None
    assert ("the provider refused the output schema" in failure.detail) is says_schema


def test_the_providers_reason_is_bounded_one_line_and_escaped() -> None:
    error = {"message": "a\nb\x1b[31m\u2028" + "x" * 5000, "code": 5, "type": None}
    failure = failure_for_status(400, {}, json.dumps({"error": error}).encode())
    assert failure is not None
    reason = failure.detail.removeprefix("model gateway returned HTTP 400: ")
    assert len(reason.encode()) <= MAX_REASON_BYTES
    assert reason.startswith("message=a\\u000ab\\u001b[31m\\u2028xxx")
    assert "\n" not in failure.detail
    assert "\x1b" not in failure.detail
    assert reason.endswith("...")


@pytest.mark.parametrize("body", [b"", b"busy", b"[1]", b'{"error": "text"}', b'{"error": {}}'])
def test_a_body_without_an_error_object_adds_nothing(body: bytes) -> None:
    failure = failure_for_status(400, {}, body)
    assert failure is not None
    assert failure.detail == "model gateway returned HTTP 400"


def _completion(**overrides: Any) -> bytes:
    body = chat_completion({"greeting": "hi"})
    message = body["choices"][0]["message"]
    for key, value in overrides.items():
        if key == "finish_reason":
            body["choices"][0]["finish_reason"] = value
        elif key == "body":
            body = value
        else:
            message[key] = value
    return json.dumps(body).encode()


@pytest.mark.parametrize(
    ("raw", "fragment"),
    [
        (b"<html>oops</html>", "not JSON"),
        (b"[1, 2]", "not a chat completion"),
        (_completion(body={"error": {"message": "x"}}), "not a chat completion"),
        (_completion(body={"id": "x", "choices": []}), "not a chat completion"),
        (_completion(content=None), "content is empty"),
        (_completion(refusal="I can't help with that"), "refused"),
        (_completion(finish_reason="length"), "finish_reason length"),
        (_completion(finish_reason="content_filter"), "finish_reason content_filter"),
        (_completion(content=None, tool_calls=[{"id": "1", "type": "function"}]), "tool_calls"),
        (_completion(content="Sure! Here it is: {"), "content is not JSON"),
        (_completion(content='{"a":1}{"b":2}'), "content is not JSON"),
    ],
)
def test_invalid_responses(raw: bytes, fragment: str) -> None:
    with pytest.raises(WireFailure) as raised:
        parse_completion(raw)
    assert raised.value.code == INVALID
    assert fragment in raised.value.detail


def test_valid_completion_keeps_trace_fields() -> None:
    body = chat_completion(
        {"greeting": "hi"},
        usage={
            "prompt_tokens": 10,
            "completion_tokens": 4,
            "total_tokens": 14,
            "prompt_tokens_details": {"cached_tokens": 6},
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
        response_id="chatcmpl-1",
        model="gpt-x",
    )
    completion = parse_completion(json.dumps(body).encode())
    assert completion.output == {"greeting": "hi"}
    assert (completion.finish_reason, completion.response_id, completion.provider_model) == (
        "stop",
        "chatcmpl-1",
        "gpt-x",
    )
    # Langfuse's normalisation: cached/reasoning tokens are taken out of input/output.
    assert completion.usage == {
        "input": 4,
        "output": 2,
        "total": 14,
        "input_cached_tokens": 6,
        "output_reasoning_tokens": 2,
    }


def test_empty_refusal_and_object_content_are_accepted() -> None:
    completion = parse_completion(_completion(refusal="", content={"greeting": "hi"}))
    assert completion.output == {"greeting": "hi"}


def test_usage_details_ignores_junk() -> None:
    assert usage_details({"prompt_tokens": True, "completion_tokens": "4"}) == {}
    assert usage_details(None) == {}
