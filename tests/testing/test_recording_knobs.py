"""The plugin's fixtures follow every pytest-recording knob a host uses, as it would.

Each host run pairs the README's ``templiqx_replay_runtime`` test with a ``@pytest.mark.vcr``
test of the host's own runtime (pytest-recording's own behaviour, side by side), against
a loopback provider that echoes its key: ``record_mode`` in the host's ``vcr_config`` and
in the ``vcr`` mark, ``--disable-recording``, ``--block-network`` and ``--allowed-hosts``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.testing.conftest import HOST_KEY, MARKED, Provider, cassette, greetings, passes, run

pytestmark = pytest.mark.slow

VCR_CONFIG = """
import pytest


@pytest.fixture(scope="module")
def vcr_config(templiqx_vcr_config):
    return {**templiqx_vcr_config, "record_mode": "once"}
"""

#: Which of two hosts a test can open a socket to, while its cassette replays.
REACH = """
import os
import socket
from urllib.parse import urlsplit


def reach(host):
    port = urlsplit(os.environ["PROVIDER_URL"]).port
    with socket.socket() as sock:
        sock.settimeout(5)
        try:
            sock.connect((host, port))
        except RuntimeError:  # pytest-recording's guard: nothing left the process
            return "blocked"
        return "open"


def test_reach(templiqx_replay_runtime):
    templiqx_replay_runtime("tests/empty.yaml")  # replays (nothing)
    assert f"{reach('127.0.0.1')},{reach('0.0.0.0')}" == os.environ["EXPECT"]
"""


def cassettes(host: pytest.Pytester) -> list[Path]:
    found = sorted(Path(host.path).rglob("*.yaml"))
    for path in found:
        assert HOST_KEY not in path.read_text()
    return [p for p in found if "cassettes" in p.parts]


def test_vcr_config_record_mode(host: pytest.Pytester, provider: Provider) -> None:
    (host.path / "tests" / "conftest.py").write_text(VCR_CONFIG)
    (host.path / "tests" / "test_marked.py").write_text(MARKED)

    # the host's vcr_config says once: missing cassettes are recorded without any flag
    passes(host, provider, calls=2)
    assert greetings(host, "test_greeting") == greetings(host, "test_marked") == ["v1"]

    # pytest-recording's cassette takes vcr_config's record_mode over --record-mode: so do we
    provider.version = 2
    passes(host, provider, "--record-mode=all", calls=0)
    passes(host, provider, "--record-mode=rewrite", calls=0)
    assert greetings(host, "test_greeting") == greetings(host, "test_marked") == ["v1"]


def test_vcr_mark_record_mode(host: pytest.Pytester, provider: Provider) -> None:
    test = host.path / "tests" / "test_greeting.py"
    test.write_text(
        "import pytest\n\npytestmark = pytest.mark.vcr(record_mode='once')\n" + test.read_text()
    )
    (host.path / "tests" / "test_marked.py").write_text(
        MARKED.replace("@pytest.mark.vcr\n", "@pytest.mark.vcr(record_mode='once')\n")
    )

    passes(host, provider, calls=2)  # the mark's once records; nothing else says so
    passes(host, provider, calls=0)  # then replays
    assert greetings(host, "test_greeting") == greetings(host, "test_marked") == ["v1"]
    # the mark overrides vcr_config; CLI still loses to both for the cassette
    passes(host, provider, "--record-mode=all", calls=0)


def test_disable_recording(host: pytest.Pytester, provider: Provider) -> None:
    (host.path / "tests" / "test_marked.py").write_text(MARKED)

    # no cassette at all: every run makes real calls, whatever the record mode
    passes(host, provider, "--disable-recording", calls=2)
    passes(host, provider, "--disable-recording", "--record-mode=once", calls=2)
    assert cassettes(host) == []
    assert [r.headers["authorization"] for r in provider.server.requests] == [
        f"Bearer {HOST_KEY}"
    ] * 4

    # recording back on: the default replays, and there is nothing to replay
    result, calls = run(host, provider)
    result.assert_outcomes(failed=2)
    assert calls == 0


def test_block_network(
    host: pytest.Pytester, provider: Provider, monkeypatch: pytest.MonkeyPatch
) -> None:
    (host.path / "tests" / "test_marked.py").write_text(MARKED)
    loopback = r"--allowed-hosts=127\.0\.0\.1"
    # 0.0.0.0 reaches the loopback provider (nothing leaves the machine), but it is no
    # loopback name: a provider elsewhere, as far as every guard is concerned
    elsewhere = provider.server.base_url.replace("127.0.0.1", "0.0.0.0")
    monkeypatch.setenv("TEMPLIQX_MODEL_BASE_URL", elsewhere)
    monkeypatch.setenv("PROVIDER_URL", provider.server.base_url)

    # recording: pytest-recording lifts its block for a vcr test that records; so do we
    passes(host, provider, "--record-mode=once", "--block-network", loopback, calls=2)
    assert greetings(host, "test_greeting") == greetings(host, "test_marked") == ["v1"]
    for test in ("test_greeting", "test_marked"):
        assert "0.0.0.0" in str(cassette(host, test)[0]["request"])

    # replaying: the host's allowed hosts only (its block), or loopback only (ours)
    (host.path / "tests" / "test_reach.py").write_text(REACH)
    (host.path / "tests" / "empty.yaml").write_text("interactions: []\nversion: 1\n")
    for args, expect in [
        (("--block-network", loopback), "open,blocked"),
        (("--block-network", r"--allowed-hosts=0\.0\.0\.0"), "blocked,open"),
        ((), "open,blocked"),
    ]:
        monkeypatch.setenv("EXPECT", expect)
        result, calls = run(host, provider, *args)
        result.assert_outcomes(passed=3)
        assert calls == 0, args
