"""``templiqx execute … --replay CASSETTE`` is the offline job, through the real console script.

A request the cassette cannot answer is one line on stderr (code, cassette, reason; the
body diff only with ``TEMPLIQX_DEBUG=1``), and a replay sends nothing anywhere: with
Langfuse keys set, a loopback OTLP receiver standing in for Langfuse receives nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from templiqx_langfuse import REDACTED
from tests.cli.conftest import Run
from tests.cli.test_cli import GREETING
from tests.langfuse.test_secret_encodings import KEYS, assert_no_secret
from tests.otlp_receiver import otlp_receiver

CASSETTE = "cassettes/greeting-success.yaml"
SECRET = "sk-lf-replay-SECRET-31337"


@pytest.fixture
def other_inputs(tmp_path: Path) -> Path:
    """Inputs the cassette was not recorded with (its request body differs)."""
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps({"name": "Somebody Else Entirely"}))
    return path


REPLAYS = {
    "langfuse": ["--runtime", "langfuse", "--replay", CASSETTE],
    "langfuse-stream": ["--runtime", "langfuse", "--replay", CASSETTE, "--stream"],
    "openai-stream": [
        "--runtime",
        "openai-stream",
        "--replay",
        "cassettes/greeting-stream-litellm.yaml",
        "--stream",
    ],
}


@pytest.mark.parametrize("replay", REPLAYS.values(), ids=REPLAYS.keys())
def test_a_cassette_miss_is_one_line(run_cli: Run, other_inputs: Path, replay: list[str]) -> None:
    args = ["execute", GREETING[0], "--inputs", str(other_inputs), *GREETING[3:], *replay]
    result = run_cli(*args, "--json", env={"LANGFUSE_SECRET_KEY": SECRET})
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if "TQX_" in line]
    envelope = json.loads(result.stdout.splitlines()[-1])
    assert len(lines) == 1, lines
    (line,) = lines
    assert line.startswith("templiqx: execute_contract failed: TQX_NOT_FOUND")
    assert replay[3] in line  # the cassette's path
    assert "differ in body" in line
    assert "TEMPLIQX_DEBUG=1" in line
    assert "Somebody Else" not in line  # no request data without asking for it
    assert SECRET not in line
    (diagnostic,) = envelope["diagnostics"]
    assert "\n" not in diagnostic["message"]  # stdout says the same, on one line


def test_debug_shows_the_body_diff(run_cli: Run, other_inputs: Path) -> None:
    result = run_cli(
        "execute",
        GREETING[0],
        "--inputs",
        str(other_inputs),
        *GREETING[3:],
        "--runtime",
        "langfuse",
        "--replay",
        CASSETTE,
        env={"TEMPLIQX_DEBUG": "1"},
    )
    assert result.returncode == 2
    assert "+++ this request" in result.stderr
    assert "Hello Somebody Else Entirely for Blinqx" in result.stderr


def test_debug_diff_redacts_keys_json_would_escape(run_cli: Run, tmp_path: Path) -> None:
    """Keys holding ``\"`` and ``\\`` appear JSON-escaped in the diffed body."""
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"name": "Bob " + " ".join(KEYS.values())}))
    args = ["execute", GREETING[0], "--inputs", str(inputs), *GREETING[3:]]
    replay = ["--runtime", "langfuse", "--replay", "cassettes/greeting-success.yaml"]
    result = run_cli(*args, *replay, "--json", env={**KEYS, "TEMPLIQX_DEBUG": "1"})
    assert result.returncode == 2, result.stderr
    assert "+++ this request" in result.stderr  # the diff is shown ...
    assert f"Hello Bob {REDACTED} {REDACTED} {REDACTED} for Blinqx" in result.stderr
    assert_no_secret(result.stdout + result.stderr)  # ... without the keys in any form


@pytest.mark.parametrize(
    ("runtime", "cassette", "stream"),
    [
        ("langfuse", CASSETTE, False),
        ("langfuse", CASSETTE, True),
        ("openai-stream", "cassettes/greeting-stream-litellm.yaml", True),
    ],
)
def test_a_replay_exports_no_traces_even_with_keys(
    run_cli: Run, runtime: str, cassette: str, stream: bool
) -> None:
    with otlp_receiver() as langfuse:
        env = {
            "LANGFUSE_PUBLIC_KEY": "pk-lf-replay",
            "LANGFUSE_SECRET_KEY": SECRET,
            "LANGFUSE_BASE_URL": langfuse.base_url,
        }
        args = ["execute", *GREETING, "--runtime", runtime, "--replay", cassette]
        result = run_cli(*args, *(["--stream"] if stream else []), env=env)
        assert result.returncode == 0, result.stderr
        assert langfuse.requests == []  # no span, no score, not even a connection
    tracing_lines = [line for line in result.stderr.splitlines() if "tracing" in line]
    assert tracing_lines == [
        f"templiqx: replaying {cassette} offline: Langfuse tracing is off (LANGFUSE_* keys ignored)"
    ]
    assert "trace: " not in result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_replay_without_keys_says_nothing_about_tracing(run_cli: Run) -> None:
    result = run_cli("execute", *GREETING, "--runtime", "langfuse", "--replay", CASSETTE)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
