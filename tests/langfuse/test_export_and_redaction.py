"""The export path's circuit breaker and the redactor, as units."""

from __future__ import annotations

import base64
import logging
from collections.abc import Sequence

import pytest

from templiqx_langfuse import Redactor
from templiqx_langfuse._export import CircuitBreaker


class Flaky:
    def __init__(self, results: list[bool | Exception]) -> None:
        self.results = results
        self.calls = 0

    def __call__(self, batch: Sequence[int]) -> bool:
        self.calls += 1
        result = self.results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


def test_breaker_drops_quietly_during_cool_down_then_probes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    clock = [100.0]
    monkeypatch.setattr("templiqx_langfuse._export.time.monotonic", lambda: clock[0])
    inner = Flaky([False, ConnectionError("down"), True])
    breaker = CircuitBreaker(inner, cool_down_s=30)
    batch = [1, 2, 3]
    with caplog.at_level(logging.WARNING, logger="templiqx_langfuse"):
        assert breaker(batch) is False  # real failure: opens
        for _ in range(100):
            assert breaker(batch) is False  # dropped, no I/O
        assert inner.calls == 1
        clock[0] += 31
        assert breaker(batch) is False  # probe raises: reopens
        clock[0] += 31
        assert breaker(batch) is True  # probe succeeds: closed
    assert inner.calls == 3
    assert breaker.dropped == 3 + 300 + 3
    assert breaker.exported == 3
    assert len([r for r in caplog.records if "export of traces failed" in r.getMessage()]) == 1


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
