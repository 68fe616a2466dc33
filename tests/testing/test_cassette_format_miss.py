"""A cassette miss whose only difference is the response format says so: a change of
``ModelConfig.strict`` (or of the output schema sent) is told apart from a changed prompt."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import yaml
from vcr.errors import CannotOverwriteExistingCassetteException

from templiqx_langfuse.testing.cassettes import FORMAT_ONLY, no_match_error, open_cassette
from tests.conftest import REPO_ROOT

GREETING = REPO_ROOT / "cassettes" / "greeting-success.yaml"
URL = "http://loopback.templiqx.invalid/v1/chat/completions"


def recorded_body(path: Path) -> dict[str, object]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    return dict(json.loads(data["interactions"][0]["request"]["body"]))


def miss_for(body: dict[str, object]) -> str:
    with (
        open_cassette(GREETING),
        pytest.raises(CannotOverwriteExistingCassetteException) as raised,
    ):
        httpx.post(URL, content=json.dumps(body, sort_keys=True, separators=(",", ":")))
    return str(no_match_error(raised.value, brief=True))


def test_a_miss_that_differs_only_in_the_response_format_says_so() -> None:
    body = recorded_body(GREETING)
    body["response_format"]["json_schema"]["strict"] = False  # type: ignore[index]
    message = miss_for(body)
    assert "differ in body" in message
    assert FORMAT_ONLY in message


def test_a_miss_that_differs_in_the_prompt_does_not_blame_the_format() -> None:
    body = recorded_body(GREETING)
    body["response_format"]["json_schema"]["strict"] = False  # type: ignore[index]
    body["temperature"] = 0.5
    message = miss_for(body)
    assert "differ in body" in message
    assert FORMAT_ONLY not in message
