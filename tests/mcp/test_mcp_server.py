"""The MCP server as an agent host meets it, through the SDK's own client: in process on the
SDK's memory transport (the server ``templiqx mcp ARGS`` builds, in its working directory
and environment), and as a subprocess on stdio where the transport is what is tested."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import anyio
import pytest
from mcp import ClientSession
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client

from templiqx_core._cli import build_parser
from templiqx_core._mcp import build_server
from templiqx_core._runtimes import RuntimeOptions
from tests.conftest import REPO_ROOT, parse_stream_event

TEMPLIQX = str(Path(sys.executable).with_name("templiqx"))
CONTRACT = "examples/greeting.yaml"
INPUTS = {"name": "Ryan"}
CONTEXT = {"organization": "Blinqx"}
REPLAY = ["--runtime", "langfuse", "--replay", "cassettes/greeting-success.yaml"]


def clean_env() -> dict[str, str]:
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANGFUSE_", "TEMPLIQX_", "OPENAI_"))
    }


@asynccontextmanager
async def session(
    *args: str, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
) -> AsyncIterator[Client]:
    """A client of the server ``templiqx mcp ARGS`` builds in ``cwd`` with ``env``, in process."""
    parsed = build_parser().parse_args(["mcp", *args])
    environ = {**clean_env(), **(env or {})}
    before = Path.cwd()
    with mock.patch.dict(os.environ, environ, clear=True):
        os.chdir(cwd)
        try:
            options = RuntimeOptions(replay=parsed.replay, env=environ)
            server, shared = build_server(parsed.runtime or "scripted", options)
            try:
                async with Client(server) as client:
                    yield client
            finally:
                if shared is not None:
                    shared.close()
        finally:
            os.chdir(before)


@asynccontextmanager
async def stdio_session(
    *args: str, cwd: Path = REPO_ROOT, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """A client of ``templiqx mcp ARGS`` run as an agent host runs it: a subprocess on stdio."""
    params = StdioServerParameters(
        command=TEMPLIQX, args=["mcp", *args], cwd=str(cwd), env={**clean_env(), **(env or {})}
    )
    with open(os.devnull, "w") as errlog:
        async with (
            stdio_client(params, errlog=errlog) as streams,
            ClientSession(*streams) as client,
        ):
            await client.initialize()
            yield client


def structured(result: Any) -> dict[str, Any]:
    assert not result.is_error, result.content
    return dict(result.structured_content)


def run(coro: Any) -> Any:
    return anyio.run(coro)


def test_lists_both_tools_on_stdio() -> None:
    async def scenario() -> list[str]:
        async with stdio_session(*REPLAY) as client:
            return sorted(tool.name for tool in (await client.list_tools()).tools)

    assert run(scenario) == ["compile_contract", "execute_contract"]


def test_compile_execute_and_stream() -> None:
    progress: list[tuple[float, str | None]] = []

    async def on_progress(value: float, total: float | None, message: str | None) -> None:
        progress.append((value, message))

    async def scenario() -> tuple[Any, Any, Any]:
        async with session(*REPLAY) as client:
            args = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT}
            compiled = await client.call_tool("compile_contract", args)
            plain = await client.call_tool("execute_contract", args)
            streamed = await client.call_tool(
                "execute_contract", {**args, "stream": True}, progress_callback=on_progress
            )
            return compiled, plain, streamed

    compiled, plain, streamed = run(scenario)
    compiled_env = structured(compiled)
    assert compiled_env["result"]["messages"][1]["content"] == "Hello Ryan for Blinqx"
    plain_env, streamed_env = structured(plain), structured(streamed)
    assert plain_env["ok"] is True
    assert "stream_events" not in plain_env
    assert streamed_env["fingerprints"] == plain_env["fingerprints"]
    events = [parse_stream_event(message) for _, message in progress if message]
    assert [e.kind for e in events] == ["Complete"]
    assert streamed_env["stream_events"] == [
        json.loads(message) for _, message in progress if message
    ]


def test_errors_are_tool_errors_and_the_server_keeps_serving() -> None:
    async def scenario() -> tuple[Any, Any, Any]:
        async with session(*REPLAY) as client:
            missing = await client.call_tool("execute_contract", {"contract": "nope.yaml"})
            invalid = await client.call_tool(
                "compile_contract",
                {"contract": CONTRACT, "inputs": {"name": 42}, "context": CONTEXT},
            )
            good = await client.call_tool(
                "compile_contract", {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT}
            )
            return missing, invalid, good

    missing, invalid, good = run(scenario)
    assert missing.is_error
    assert "TQX_NOT_FOUND" in missing.content[0].text
    # As the reference MCP server: domain diagnostics are a result, not an MCP error.
    rejected = structured(invalid)
    assert rejected["ok"] is False
    assert [d["code"] for d in rejected["diagnostics"]] == ["TQX_VALUE_SCHEMA"]
    assert structured(good)["ok"] is True


def test_text_content_is_the_reference_structured_envelope() -> None:
    # templiqx-mcp's StructuredEnvelope: the result goes through serde_json::Value, so its
    # keys are sorted at every level; the text is serde_json::to_string of it.
    async def scenario() -> Any:
        async with session(*REPLAY) as client:
            args = {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT}
            return await client.call_tool("execute_contract", args)

    result = run(scenario)
    text = result.content[0].text
    envelope = json.loads(text)
    assert envelope == structured(result)
    assert list(envelope) == [
        "api_version",
        "operation",
        "ok",
        "result",
        "diagnostics",
        "fingerprints",
    ]
    assert list(envelope["result"]) == sorted(envelope["result"])
    assert list(envelope["result"]["adapter"]) == ["capabilities", "id", "version"]
    assert text == json.dumps(envelope, separators=(",", ":"), ensure_ascii=False)


def failed_start(*args: str, cwd: Path = REPO_ROOT) -> str:
    """Start ``templiqx mcp ARGS``, expect it to fail at once; its stderr."""
    result = subprocess.run(
        [TEMPLIQX, "mcp", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        env=clean_env(),
        check=False,
    )
    assert result.returncode == 1  # the command itself failed
    assert "Traceback" not in result.stderr
    return result.stderr


def test_unknown_runtime_fails_at_start_with_one_line() -> None:
    assert "unknown runtime 'warp-drive'" in failed_start("--runtime", "warp-drive")


def test_cli_and_mcp_give_identical_envelopes() -> None:
    cli = subprocess.run(
        [
            TEMPLIQX,
            "execute",
            CONTRACT,
            "--inputs",
            "examples/greeting.inputs.json",
            "--context",
            "examples/greeting.context.json",
            *REPLAY,
            "--stream",
        ],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
        check=True,
    )
    cli_envelope = json.loads(cli.stdout.splitlines()[-1])

    async def scenario() -> Any:
        async with session(*REPLAY) as client:
            return await client.call_tool(
                "execute_contract",
                {"contract": CONTRACT, "inputs": INPUTS, "context": CONTEXT, "stream": True},
            )

    assert structured(run(scenario)) == cli_envelope


@pytest.mark.parametrize("runtime", [["--runtime", "scripted"]])
def test_scripted_runtime_with_fixture_output(runtime: list[str]) -> None:
    async def scenario() -> Any:
        async with session(*runtime) as client:
            return await client.call_tool(
                "execute_contract",
                {
                    "contract": CONTRACT,
                    "inputs": INPUTS,
                    "context": CONTEXT,
                    "fixture_output": {"greeting": "Hi"},
                },
            )

    envelope = structured(run(scenario))
    assert envelope["result"]["output"] == {"greeting": "Hi"}
