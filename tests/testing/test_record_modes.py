"""A host suite records, re-records and replays with pytest-recording's --record-mode.

The host project is the README's snippets verbatim (a ``templiqx_replay_runtime`` test
and the ``vcr_config`` conftest) plus a ``@pytest.mark.vcr`` test of the host's own
runtime, run in subprocesses against a loopback provider that echoes its key.
"""

from __future__ import annotations

import pytest

from tests.testing.conftest import MARKED, Provider, greetings, passes, run

pytestmark = pytest.mark.slow


def test_every_record_mode(
    host: pytest.Pytester, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    (host.path / "tests" / "test_marked.py").write_text(MARKED)

    # none: nothing recorded yet, so both fail (once each) and nothing reaches the provider
    result, calls = run(host, provider, "--record-mode=none")
    result.assert_outcomes(failed=2)
    assert calls == 0
    result.stdout.fnmatch_lines(["*test_greeting.yaml: *the cassette doesn't exist*"])

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
