"""``templiqx execute --repair N``: the real console script against the loopback model
server; the envelope says how many tries the call took."""

from __future__ import annotations

import itertools
import json

import pytest

from tests.cli.conftest import Run
from tests.cli.test_cli import GREETING
from tests.conftest import MODEL_KEY
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)


def answering(server: LoopbackModelServer, *contents: object) -> dict[str, str]:
    """The server answers ``contents`` in turn (the last repeats); the CLI's environment."""
    turn = itertools.count()

    def reply(request: ServerRequest) -> Reply:
        return json_reply(chat_completion(contents[min(next(turn), len(contents) - 1)]))

    server.set_responder(reply)
    return {
        "TEMPLIQX_MODEL_API_KEY": MODEL_KEY,
        "TEMPLIQX_MODEL": "test-model",
        "TEMPLIQX_MODEL_BASE_URL": server.base_url,
        "TEMPLIQX_MODEL_TIMEOUT_S": "10",
    }


def test_repair_makes_the_invalid_answer_valid_and_says_the_attempts(
    run_cli: Run, model_server: LoopbackModelServer
) -> None:
    env = answering(model_server, "Hello!", {"greeting": 7}, {"greeting": "Hello Ryan"})
    result = run_cli("execute", *GREETING, "--runtime", "langfuse", "--repair", "3", env=env)
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["ok"]
    assert envelope["attempts"] == 3
    assert envelope["result"]["output"] == {"greeting": "Hello Ryan"}
    assert len(model_server.requests) == 3
    # The receipt's request fingerprint is the original interaction's, as without repair.
    plain = run_cli("execute", *GREETING, "--runtime", "langfuse", env=env)
    assert json.loads(plain.stdout)["fingerprints"] == envelope["fingerprints"]
    assert "attempts" not in json.loads(plain.stdout)


def test_repair_out_of_tries_reports_the_last_failure(
    run_cli: Run, model_server: LoopbackModelServer
) -> None:
    env = answering(model_server, "never JSON")
    result = run_cli("execute", *GREETING, "--runtime", "langfuse", "--repair", "2", env=env)
    assert result.returncode == 2
    envelope = json.loads(result.stdout)
    assert envelope["attempts"] == 2
    assert not envelope["ok"]
    assert envelope["diagnostics"][0]["code"] == "TQX_RUNTIME_INVALID_RESPONSE"
    assert "never JSON" not in result.stdout + result.stderr  # the answer stays in memory
    assert len(model_server.requests) == 2


def test_repair_that_is_not_a_count_is_a_usage_error(run_cli: Run) -> None:
    result = run_cli("execute", *GREETING, "--runtime", "scripted", "--repair", "two")
    assert result.returncode == 2
    assert "--repair" in result.stderr


@pytest.mark.parametrize("value", ["0", "-2", "11"])
def test_repair_out_of_range_is_refused_by_the_repairing_runtime(run_cli: Run, value: str) -> None:
    """From 1 to ``MAX_ATTEMPTS``: ``RepairingRuntime`` says so, as a typed failure (exit 1)."""
    result = run_cli("execute", *GREETING, "--runtime", "scripted", "--repair", value)
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.startswith("templiqx: TQX_DATA_INVALID: attempts must be")
