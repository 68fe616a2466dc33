"""The export path's retry pauses and the redactor, as units."""

from __future__ import annotations

import base64

from templiqx_langfuse import Redactor
from templiqx_langfuse._export import RetryPolicy


def test_retry_pauses_double_with_jitter_up_to_the_ceiling_or_follow_retry_after() -> None:
    policy = RetryPolicy(first_backoff_s=0.5, max_backoff_s=8.0)
    for attempt, ceiling in [(1, 0.5), (2, 1.0), (3, 2.0), (5, 8.0), (9, 8.0)]:
        pauses = [policy.pause(attempt, None) for _ in range(50)]
        assert all(ceiling / 2 <= p <= ceiling for p in pauses), (attempt, pauses)
    assert policy.pause(1, 3.0) == 3.0  # the server's Retry-After, when within bounds
    assert policy.pause(1, 3600.0) <= 0.5  # not an hour: the policy's own pause


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
    assert redactor.value(clean) is clean  # fast path: no copy when no secret is present


def test_redactor_secrets_that_json_escapes_still_redact() -> None:
    tricky = 'se"cr\\et-123'
    redactor = Redactor([tricky])
    assert redactor.value({"a": [f"x{tricky}y"]}) == {"a": ["x[REDACTED]y"]}
