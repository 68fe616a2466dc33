"""Secrets with characters JSON or URLs escape are redacted in every form they take.

A key holding ``"`` or ``\\`` appears escaped in a JSON body, so redacting only the raw
key let it through the cassette-miss body diff (``TEMPLIQX_DEBUG=1``, tested in
``tests/cli/test_cli_replay.py``) and into recorded cassette bodies. The keys are the review's.
"""

from __future__ import annotations

import json
from urllib.parse import quote

import vcr.request

from templiqx_langfuse import REDACTED, Redactor
from templiqx_langfuse.testing.cassettes import Scrubber, cassette_config

KEYS = {
    "TEMPLIQX_MODEL_API_KEY": 'MK"EY\\SE/CRET<x>&y',
    "LANGFUSE_SECRET_KEY": 'sk-lf-LF"SE\\CRET',
    "OPENAI_API_KEY": 'sk-SEC"RET\\OPEN/AI<>&9',
}


def forms(secret: str) -> list[str]:
    """The raw key, JSON-escaped once and twice (a JSON text inside a JSON string), and
    the escape Go writes for ``<>&``, and percent-encoded."""
    once = json.dumps(secret)[1:-1]
    go = once.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return [secret, once, json.dumps(once)[1:-1], go, quote(secret, safe="")]


def assert_no_secret(text: str) -> None:
    for secret in KEYS.values():
        for form in forms(secret):
            assert form not in text, form


def test_recorded_bodies_and_uris_redact_every_form() -> None:
    secrets = list(KEYS.values())
    before_record = cassette_config(Scrubber(secrets, env={}))["before_record_request"]
    body = json.dumps({"echo": secrets, "nested": json.dumps({"k": secrets})})
    uri = "http://127.0.0.1:1/v1?key=" + quote(secrets[0], safe="")
    request = before_record(vcr.request.Request("POST", uri, body.encode(), {}))
    recorded = request.body.decode() + request.uri
    assert_no_secret(recorded)
    assert recorded.count(REDACTED) == 7
    assert_no_secret(Scrubber(secrets).text(json.dumps(body)))


def test_redactor_covers_go_style_and_slash_escapes() -> None:
    redactor = Redactor(KEYS.values())
    for secret in KEYS.values():
        for form in forms(secret):
            assert redactor.text(f"<{form}>") == f"<{REDACTED}>"
        assert redactor.text(json.dumps(secret)[1:-1].replace("/", "\\/")) == REDACTED
        assert redactor.json_text({"k": secret, "v": [json.dumps(secret)]}) == (
            f'{{"k":"{REDACTED}","v":["\\"{REDACTED}\\""]}}'
        )
