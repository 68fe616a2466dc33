"""The CLI (``--stream``) and the MCP server (``stream: true``) show the host's deltas live.

Offline from a cassette of a real stream (LiteLLM proxy, recorded for this very contract),
and live from a paced loopback stream: the first delta must reach the CLI's stdout (and
the MCP client) while the provider is still streaming, not when the call ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

from tests.conftest import REPO_ROOT, parse_stream_event
from tests.loopback import LoopbackModelServer
from tests.mcp.test_mcp_server import (
    CONTEXT,
    CONTRACT,
    INPUTS,
    clean_env,
    session,
    stdio_session,
    structured,
)
from tests.streaming.conftest import streamed, text_stream

TEMPLIQX = str(Path(sys.executable).with_name("templiqx"))
REPLAY = ["--runtime", "openai-stream", "--replay", "cassettes/greeting-stream-litellm.yaml"]
EXECUTE = [
    "execute",
    CONTRACT,
    "--inputs",
    "examples/greeting.inputs.json",
    "--context",
    "examples/greeting.context.json",
]
LITELLM_DELTAS = ['{"g', "ree", "tin", 'g":', ' "H', "ell", "o R", "yan", '"}']


def test_cli_stream_prints_the_deltas_then_complete() -> None:
    result = subprocess.run(
        [TEMPLIQX, *EXECUTE, *REPLAY, "--stream"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    events = [parse_stream_event(line) for line in lines[:-1]]
    assert [e.text for e in events[:-1]] == LITELLM_DELTAS  # type: ignore[union-attr]
    assert events[-1].kind == "Complete"
    envelope = lines[-1]
    assert envelope["ok"] is True
    assert envelope["result"]["output"] == {"greeting": "Hello Ryan"}
    # the same request and output fingerprints as the non-streaming Langfuse adapter's, for
    # the same targets (each runtime otherwise targets the capabilities it offers)
    langfuse = subprocess.run(
        [
            TEMPLIQX,
            *EXECUTE,
            "--capability",
            "structured_output",
            "--runtime",
            "langfuse",
            "--replay",
            "cassettes/greeting-success.yaml",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )
    assert json.loads(langfuse.stdout)["fingerprints"] == envelope["fingerprints"]


def test_cli_stream_is_live(stream_server: LoopbackModelServer) -> None:
    parts = ['{"greeting": ', '"Hello', " Ry", 'an"}']
    body = text_stream(parts)
    first, rest = body.split(b"\n\n", 1)
    stream_server.set_responder(lambda request: streamed(body, pieces=[first + b"\n\n", 1.0, rest]))
    env = {
        **clean_env(),
        "TEMPLIQX_MODEL_BASE_URL": stream_server.base_url,
        "TEMPLIQX_MODEL_API_KEY": "sk-live-test-key",
        "TEMPLIQX_MODEL": "m",
    }
    started = time.monotonic()
    with subprocess.Popen(
        [TEMPLIQX, *EXECUTE, "--runtime", "openai-stream", "--stream"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as process:
        assert process.stdout is not None
        first_line = process.stdout.readline()
        first_at = time.monotonic() - started
        rest_lines = process.stdout.read().splitlines()
        ended_at = time.monotonic() - started
        assert process.wait(timeout=30) == 0
    assert parse_stream_event(first_line).kind == "Delta"
    assert ended_at - first_at > 0.7  # the first delta was out a second before the end
    assert [json.loads(line)["kind"] for line in rest_lines[:-1]] == ["Delta"] * 3 + ["Complete"]
    assert "sk-live-test-key" not in first_line + "".join(rest_lines)


def test_mcp_stream_is_live(stream_server: LoopbackModelServer) -> None:
    parts = ['{"greeting": ', '"Hello', " Ry", 'an"}']
    body = text_stream(parts)
    first, rest = body.split(b"\n\n", 1)
    stream_server.set_responder(lambda request: streamed(body, pieces=[first + b"\n\n", 1.0, rest]))
    env = {
        "TEMPLIQX_MODEL_BASE_URL": stream_server.base_url,
        "TEMPLIQX_MODEL_API_KEY": "sk-live-test-key",
        "TEMPLIQX_MODEL": "m",
    }
    arrivals: list[tuple[float, str]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if message:
            arrivals.append((time.monotonic(), message))

    async def scenario() -> tuple[Any, float]:
        async with stdio_session("--runtime", "openai-stream", env=env) as client:
            args = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT, "stream": True}
            result = await client.call_tool("execute_contract", args, progress_callback=on_progress)
            return result, time.monotonic()

    result, returned_at = anyio.run(scenario)
    assert structured(result)["result"]["output"] == {"greeting": "Hello Ryan"}
    kinds = [parse_stream_event(message).kind for _, message in arrivals]
    assert kinds == ["Delta"] * 4 + ["Complete"]
    assert returned_at - arrivals[0][0] > 0.7  # the first delta reached the client early


def test_mcp_stream_sends_each_delta_as_progress() -> None:
    progress: list[str] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        if message:
            progress.append(message)

    async def scenario() -> Any:
        async with session(*REPLAY) as client:
            args = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT, "stream": True}
            return await client.call_tool("execute_contract", args, progress_callback=on_progress)

    envelope = structured(anyio.run(scenario))
    events = [parse_stream_event(message) for message in progress]
    assert [e.kind for e in events] == ["Delta"] * len(LITELLM_DELTAS) + ["Complete"]
    assert "".join(e.text for e in events[:-1]) == '{"greeting": "Hello Ryan"}'  # type: ignore[union-attr]
    assert envelope["stream_events"] == [json.loads(message) for message in progress]
    assert envelope["result"]["output"] == {"greeting": "Hello Ryan"}


def test_cli_stream_replay_miss_is_one_failed_not_found(tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.json"
    inputs.write_text('{"name": "Someone else"}')
    args = [*EXECUTE, *REPLAY, "--stream"]
    args[args.index("examples/greeting.inputs.json")] = str(inputs)
    result = subprocess.run(
        [TEMPLIQX, *args],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=clean_env(),
        check=False,
    )
    assert result.returncode == 2  # a not-ok envelope, as the reference CLI
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [(e["kind"], e["code"]) for e in lines[:-1]] == [("Failed", "TQX_NOT_FOUND")]
    assert lines[-1]["diagnostics"][0]["code"] == "TQX_NOT_FOUND"
    assert "greeting-stream-litellm.yaml" in result.stderr
