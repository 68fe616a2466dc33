"""Target capabilities are the caller's (``--capability``) or the contract's, never the runtime's.

As in the reference CLI (which passes only ``--capability`` to compile and execute), the
compiled interaction — and so ``execute``'s ``request`` fingerprint — does not depend on
which runtime runs it: the Langfuse adapter (which also offers ``langfuse_prompt``), the
streaming host and the scripted runtime agree with each other and with ``compile``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.cli.conftest import Run
from tests.cli.test_cli import GREETING
from tests.mcp.test_mcp_server import CONTEXT, CONTRACT, INPUTS, REPLAY, session

RUNTIMES = {
    "langfuse": ["--runtime", "langfuse", "--replay", "cassettes/greeting-success.yaml"],
    "openai-stream": [
        "--runtime",
        "openai-stream",
        "--replay",
        "cassettes/greeting-stream-litellm.yaml",
    ],
    "scripted": ["--runtime", "scripted", "--fixture-output", "FIXTURE"],
}


@pytest.fixture
def fixture_output(tmp_path: Path) -> str:
    path = tmp_path / "output.json"
    path.write_text(json.dumps({"greeting": "Hello Ryan"}))
    return str(path)


def envelope(run_cli: Run, *args: str) -> dict[str, Any]:
    result = run_cli(*args, "--json")
    assert result.returncode == 0, result.stderr
    data: dict[str, Any] = json.loads(result.stdout.splitlines()[-1])
    return data


def request_fingerprints(run_cli: Run, fixture: str, *caps: str) -> dict[str, str]:
    found = {}
    for name, args in RUNTIMES.items():
        args = [fixture if a == "FIXTURE" else a for a in args]
        found[name] = envelope(run_cli, "execute", *GREETING, *args, *caps)["fingerprints"][
            "request"
        ]
    return found


def test_execute_fingerprints_the_same_interaction_on_every_runtime(
    run_cli: Run, fixture_output: str
) -> None:
    compiled = envelope(run_cli, "compile", *GREETING)["fingerprints"]["compiled_interaction"]
    assert request_fingerprints(run_cli, fixture_output) == dict.fromkeys(RUNTIMES, compiled)


def test_explicit_capabilities_are_taken_as_given_on_every_runtime(
    run_cli: Run, fixture_output: str
) -> None:
    caps = ("--capability", "structured_output", "--capability", "langfuse_prompt")
    compiled = envelope(run_cli, "compile", *GREETING, *caps)
    assert compiled["result"]["target_capabilities"] == ["langfuse_prompt", "structured_output"]
    expected = compiled["fingerprints"]["compiled_interaction"]
    assert request_fingerprints(run_cli, fixture_output, *caps) == dict.fromkeys(RUNTIMES, expected)
    default = envelope(run_cli, "compile", *GREETING)["fingerprints"]["compiled_interaction"]
    assert expected != default  # the targets are part of what is fingerprinted


def test_mcp_execute_defaults_to_the_contracts_capabilities_too() -> None:
    arguments = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT}

    async def scenario() -> tuple[Any, Any]:
        async with session(*REPLAY) as client:
            compiled = await client.call_tool("compile_contract", arguments)
            executed = await client.call_tool("execute_contract", arguments)
            return compiled.structured_content, executed.structured_content

    compiled, executed = anyio.run(scenario)
    assert executed["ok"] is True
    assert executed["fingerprints"]["request"] == compiled["fingerprints"]["compiled_interaction"]
