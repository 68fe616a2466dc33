"""The testing page's "record against the shipped loopback server" lines, run as written.

The server command and the recording command are read from the README (only the port
becomes a free one); the host project is the README's test and conftest verbatim. After
the server is stopped, a plain ``pytest`` replays what was recorded.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

SERVER_MODULE = "templiqx_langfuse.testing.server"


def readme_commands() -> tuple[list[str], dict[str, str], list[str]]:
    """The server's arguments, and the recording line's environment and pytest arguments."""
    lines = (REPO_ROOT / "docs" / "testing.md").read_text().splitlines()
    server = next(line for line in lines if line.startswith(f"python -m {SERVER_MODULE} "))
    server_args = shlex.split(server.removesuffix("&"), comments=True)[3:]
    record = next(line for line in lines if line.startswith("TEMPLIQX_MODEL_BASE_URL="))
    words = shlex.split(record, comments=True)
    env = dict(w.split("=", 1) for w in words if "=" in w and not w.startswith("-"))
    pytest_args = words[words.index("pytest") + 1 :]
    return server_args, env, pytest_args


def test_the_readme_records_against_the_loopback_server_then_replays(
    host: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    server_args, env, pytest_args = readme_commands()
    assert pytest_args == ["--record-mode=once"]
    port = server_args.index("--port") + 1
    readme_url = env.pop("TEMPLIQX_MODEL_BASE_URL")
    assert readme_url == f"http://127.0.0.1:{server_args[port]}/v1"  # the two lines agree
    server_args[port] = "0"  # a free port: the README's may be taken on this machine
    for name in [*os.environ]:
        if name.startswith(("TEMPLIQX_", "LANGFUSE_", "OPENAI_")):
            monkeypatch.delenv(name)

    server = subprocess.Popen(
        [sys.executable, "-m", SERVER_MODULE, *server_args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline().strip()  # printed once it listens
        name, _, base_url = first.partition("=")
        assert name == "TEMPLIQX_MODEL_BASE_URL"
        assert base_url.startswith("http://127.0.0.1:")
        with monkeypatch.context() as recording:
            for key, value in {**env, "TEMPLIQX_MODEL_BASE_URL": base_url}.items():
                recording.setenv(key, value)
            recorded = host.runpytest_subprocess("tests", "-p", "no:cacheprovider", *pytest_args)
        recorded.assert_outcomes(passed=1)
    finally:
        server.send_signal(signal.SIGTERM)
        _, stderr = server.communicate(timeout=30)
    assert server.returncode == 0
    assert "served 1 request(s)" in stderr

    cassette = Path(host.path, "tests", "cassettes", "test_greeting", "test_greeting.yaml")
    text = cassette.read_text()
    assert '"Hello Ryan"' in text or "Hello Ryan" in text
    assert env["TEMPLIQX_MODEL_API_KEY"] not in text  # the key is scrubbed
    replayed = host.runpytest_subprocess("tests", "-p", "no:cacheprovider")  # server gone
    replayed.assert_outcomes(passed=1)
