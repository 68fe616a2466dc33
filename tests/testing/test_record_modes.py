"""A host suite records, re-records and replays with pytest-recording's --record-mode.

The host project is the README's snippets verbatim (a ``templiqx_replay_runtime`` test
and the ``vcr_config`` conftest) plus a ``@pytest.mark.vcr`` test of the host's own
runtime, run in subprocesses against a loopback provider that echoes its key.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.testing.conftest import HOST_KEY, Provider

pytestmark = pytest.mark.slow

MARKED = """
import os

import pytest
from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
from templiqx_langfuse import LangfuseTracedRuntime


@pytest.mark.vcr
def test_marked():
    name = os.environ.get("GREETING_NAME", "Vee")
    interaction = compile_contract(
        "examples/greeting.yaml",
        RenderRequest(inputs={"name": name}, context={"organization": "Blinqx"}),
        ["structured_output"],
    ).interaction
    with LangfuseTracedRuntime.from_env() as runtime:
        receipt = runtime.execute(ExecutionRequest(interaction=interaction))
    assert receipt.output["greeting"].startswith(f"Hello {name}")
"""


def run(host: pytest.Pytester, provider: Provider, *args: str) -> tuple[pytest.RunResult, int]:
    before = provider.calls
    result = host.runpytest_subprocess("tests", "-p", "no:cacheprovider", *args)
    return result, provider.calls - before


def passes(host: pytest.Pytester, provider: Provider, *args: str, calls: int) -> None:
    """Both host tests pass, and exactly ``calls`` requests reached the provider."""
    result, made = run(host, provider, *args)
    result.assert_outcomes(passed=2)
    assert made == calls, args


def cassette(host: pytest.Pytester, test: str) -> list[dict[str, object]]:
    path = Path(host.path, "tests", "cassettes", test, f"{test}.yaml")
    text = path.read_text()
    assert HOST_KEY not in text
    assert "Bearer" not in text
    interactions: list[dict[str, object]] = yaml.safe_load(text)["interactions"]
    return interactions


def greetings(host: pytest.Pytester, test: str) -> list[str]:
    found = []
    for interaction in cassette(host, test):
        body = interaction["response"]["body"]["string"]  # type: ignore[index]
        found += [v for v in ("v1", "v2", "v3") if v in body]
    return found


def test_every_record_mode(
    host: pytest.Pytester, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    (host.path / "tests" / "test_marked.py").write_text(MARKED)

    # none: nothing recorded yet, so both fail (once each) and nothing reaches the provider
    result, calls = run(host, provider, "--record-mode=none")
    result.assert_outcomes(failed=2)
    assert calls == 0
    result.stdout.fnmatch_lines(["*test_greeting.yaml does not exist*"])

    # once: missing cassettes are recorded at pytest-recording's per-test location
    passes(host, provider, "--record-mode=once", calls=2)
    assert greetings(host, "test_greeting") == ["v1"]
    assert greetings(host, "test_marked") == ["v1"]

    # the default (none) and once over existing cassettes replay, offline
    provider.version = 2
    passes(host, provider, calls=0)
    passes(host, provider, "--record-mode=once", calls=0)

    # new_episodes: what matches replays, a new request is recorded next to it
    passes(host, provider, "--record-mode=new_episodes", calls=0)
    monkeypatch.setenv("GREETING_NAME", "Zed")
    passes(host, provider, "--record-mode=new_episodes", calls=1)
    assert greetings(host, "test_marked") == ["v1", "v2"]
    monkeypatch.delenv("GREETING_NAME")

    # all: every request goes out again and replaces its recording
    passes(host, provider, "--record-mode=all", calls=2)
    assert greetings(host, "test_greeting") == ["v2"]
    assert sorted(greetings(host, "test_marked")) == ["v2", "v2"]  # Zed kept, Vee re-recorded

    # rewrite: the cassette is deleted and recorded afresh (Zed's interaction is gone)
    provider.version = 3
    passes(host, provider, "--record-mode=rewrite", calls=2)
    assert greetings(host, "test_greeting") == ["v3"]
    assert greetings(host, "test_marked") == ["v3"]

    # replay again with the provider refusing everything: still green, still offline
    provider.status = 401
    passes(host, provider, calls=0)
