"""The redactor, as a unit: secrets in every form they can take in text and values."""

from __future__ import annotations

import base64

from templiqx_langfuse import Redactor


def test_redactor_replaces_secrets_and_their_basic_auth_form() -> None:
    redactor = Redactor(["sk-model-1234", "pk-lf-1234", "sk-lf-1234", None, "ab"])
    basic = base64.b64encode(b"pk-lf-1234:sk-lf-1234").decode()
    assert redactor.text(f"Bearer sk-model-1234 / Basic {basic}") == (
        "Bearer [REDACTED] / Basic [REDACTED]"
    )
    assert (
        redactor.text("ab stays: too short to be a secret") == "ab stays: too short to be a secret"
    )
    value = {"k": ["x sk-model-1234 y", {"sk-lf-1234": 1}], "n": 2}
    assert redactor.value(value) == {"k": ["x [REDACTED] y", {"[REDACTED]": 1}], "n": 2}
    clean = {"k": ["nothing to see"]}
    assert redactor.value(clean) == clean


def test_redactor_secrets_that_json_escapes_still_redact() -> None:
    tricky = 'se"cr\\et-123'
    redactor = Redactor([tricky])
    assert redactor.value({"a": [f"x{tricky}y"]}) == {"a": ["x[REDACTED]y"]}
