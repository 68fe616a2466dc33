"""No secret reaches a cassette, whoever records it and wherever the provider echoes it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import RuntimeFailureError
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from templiqx_langfuse.testing.cassettes import Scrubber, open_cassette
from templiqx_langfuse.testing.replay import replaying_runtime
from tests.testing.conftest import HOST_KEY, Provider

# Not credential-shaped: only knowing the runtime's configuration can catch these.
MODEL_KEY = "plain-model-key-0123456789"
LANGFUSE_PUBLIC = "lf-public-0123456789"
LANGFUSE_SECRET = "lf-secret-0123456789"
PLAIN_SECRET = "hunter2-correct-horse"  # not credential-shaped: only secrets= can catch it


def assert_clean(path: Path, *secrets: str) -> dict[str, object]:
    text = path.read_text()
    for secret in (HOST_KEY, *secrets):
        assert secret not in text
    assert "[REDACTED]" in text
    return yaml.safe_load(text)["interactions"][0]["response"]  # type: ignore[no-any-return]


@pytest.mark.parametrize("status", [200, 401])
def test_runtime_keys_scrubbed_from_body_headers_and_reason(
    tmp_path: Path,
    provider: Provider,
    monkeypatch: pytest.MonkeyPatch,
    greeting_request: object,
    status: int,
) -> None:
    """A host-built runtime's keys, known only from its configuration: no env, no secrets=."""
    provider.status = status
    monkeypatch.delenv("TEMPLIQX_MODEL_API_KEY")
    path = tmp_path / "echo.yaml"
    runtime = LangfuseTracedRuntime(
        ModelConfig(base_url=provider.server.base_url, api_key=MODEL_KEY, model="m"),
        LangfuseConfig(
            public_key=LANGFUSE_PUBLIC, secret_key=LANGFUSE_SECRET, base_url="http://127.0.0.1:9"
        ),
        span_exporter=InMemorySpanExporter(),
    )
    with runtime, open_cassette(path, record_mode="once"):
        if status == 200:
            runtime.execute(greeting_request)  # type: ignore[arg-type]
        else:
            with pytest.raises(RuntimeFailureError):
                runtime.execute(greeting_request)  # type: ignore[arg-type]
    response = assert_clean(path, MODEL_KEY, LANGFUSE_PUBLIC, LANGFUSE_SECRET)
    assert response["status"]["message"].endswith("[REDACTED]")  # type: ignore[index]
    headers = {k.lower(): v for k, v in response["headers"].items()}  # type: ignore[attr-defined]
    assert headers["x-echo-key"] == ["[REDACTED]"]
    assert "set-cookie" not in headers
    if status == 401:
        assert "Incorrect API key provided: [REDACTED]" in response["body"]["string"]  # type: ignore[index]


def test_replaying_runtime_scrubs_the_environment_key_and_replays(
    tmp_path: Path, provider: Provider, greeting_request: object
) -> None:
    """Recording through the one builder the CLI and plugin share: the key from the env."""
    path = tmp_path / "recorded.yaml"
    with replaying_runtime(path, record_mode="once") as runtime:
        runtime.execute(greeting_request)  # type: ignore[arg-type]
    response = assert_clean(path)
    assert response["status"]["message"] == "OK [REDACTED]"  # type: ignore[index]
    # ... and the scrubbed recording replays (the request side is scrubbed identically)
    with replaying_runtime(path) as again:
        assert again.execute(greeting_request).output == {"greeting": "Hello Ryan v1"}  # type: ignore[arg-type]
    assert provider.calls == 1


def test_secrets_argument_scrubs_values_of_any_shape(tmp_path: Path, provider: Provider) -> None:
    path = tmp_path / "raw.yaml"
    with open_cassette(path, record_mode="once", secrets=[PLAIN_SECRET]):
        httpx.post(
            provider.server.base_url + "/chat/completions",
            headers={"x-custom-token": PLAIN_SECRET},
            json={"model": "m", "messages": [{"role": "user", "content": PLAIN_SECRET}]},
        )
    text = path.read_text()
    assert PLAIN_SECRET not in text
    assert text.count("[REDACTED]") >= 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "Incorrect API key provided: sk-proj-abc*********************wxyz.",
            "provided: [REDACTED].",
        ),
        ("Authorization: Bearer abc.def-ghi", "Bearer [REDACTED]"),
        ("Basic cGstbGYtMTIzOnNrLWxmLTQ1Ng==", "Basic [REDACTED]"),
        ("key pk-lf-1234abcd-5678 and sk-lf-99887766aa", "key [REDACTED] and [REDACTED]"),
        ("AIzaSyA1234567890abcdefghijklmnopqrstuv", "[REDACTED]"),
    ],
)
def test_credential_shapes_are_scrubbed(text: str, expected: str) -> None:
    assert expected in Scrubber(env={}).text(text)


@pytest.mark.parametrize("text", ["a task-manager desk-lamp", "chatcmpl-loopback", "risk-free"])
def test_ordinary_words_survive(text: str) -> None:
    assert Scrubber(env={}).text(text) == text


def test_host_vcr_config_scrubs_environment_keys(
    pytester: pytest.Pytester, provider: Provider
) -> None:
    """pytest-recording's own recording, with the README's ``vcr_config``: the env's key."""
    pytester.makeconftest(
        "import pytest\n\n@pytest.fixture(scope='module')\n"
        "def vcr_config(templiqx_vcr_config):\n    return templiqx_vcr_config\n"
    )
    pytester.makepyfile(
        f"""
        import httpx, pytest

        @pytest.mark.vcr
        def test_raw_httpx():
            response = httpx.post(
                {provider.server.base_url + "/chat/completions"!r},
                headers={{"authorization": "Bearer {HOST_KEY}", "x-custom": "{HOST_KEY}"}},
                json={{"model": "m", "messages": [{{"role": "user", "content": "{HOST_KEY}"}}]}},
            )
            assert response.status_code == 200
        """
    )
    pytester.runpytest_inprocess("-p", "no:hypothesispytest", "--record-mode=once").assert_outcomes(
        passed=1
    )
    (path,) = (pytester.path / "cassettes").rglob("*.yaml")
    response = assert_clean(path)
    assert response["status"]["message"] == "OK [REDACTED]"  # type: ignore[index]


def test_the_persister_scrubs_header_values_a_host_hook_left_as_a_tuple() -> None:
    """The last line of defence: whatever shape a host's ``before_record_response`` gave."""
    from vcr.request import Request

    from templiqx_langfuse.testing.cassettes import ScrubbingPersister

    saved: list[dict[str, Any]] = []

    class Inner:
        def save_cassette(self, path: str, data: dict[str, Any], serializer: Any) -> None:
            saved.append(data)

    response = {
        "status": {"code": 200, "message": "OK"},
        "headers": {"x-echo": (PLAIN_SECRET,), "x-one": PLAIN_SECRET},
        "body": {"string": b"{}"},
    }
    request = Request("POST", "http://127.0.0.1:1/v1/chat/completions", b"{}", {})
    persister = ScrubbingPersister(Inner(), Scrubber([PLAIN_SECRET], env={}))
    persister.save_cassette("c.yaml", {"requests": [request], "responses": [response]}, None)
    assert PLAIN_SECRET not in repr(saved)
