"""The MCP server trusts its caller no further than its roots, through a real stdio server.

The server runs in a scratch working directory holding a contract, a symlink that
escapes it and (outside it) another contract; the agent's paths are checked where they
really resolve, before any file is read. Every tool error starts with its TQX code.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import pytest

from tests.conftest import REFERENCE, REPO_ROOT
from tests.mcp.test_mcp_server import CONTEXT, INPUTS, failed_start, session

ARGS = {"inputs": INPUTS, "context": CONTEXT}


@pytest.fixture
def layout(tmp_path: Path) -> Path:
    """``work/`` (the server's cwd) and ``outside/``, each with a copy of the contract."""
    work, outside = tmp_path / "work", tmp_path / "outside"
    for folder in (work, outside):
        folder.mkdir()
        shutil.copy(REFERENCE / "demo" / "greeting.yaml", folder / "greeting.yaml")
    (work / "escape.yaml").symlink_to(outside / "greeting.yaml")
    shutil.copy(REPO_ROOT / "cassettes" / "greeting-success.yaml", outside / "cassette.yaml")
    return tmp_path


def call_all(cwd: Path, calls: list[tuple[str, dict[str, Any]]], **kw: Any) -> list[Any]:
    async def scenario() -> list[Any]:
        async with session("--runtime", "scripted", cwd=cwd, **kw) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(scenario)


def error_of(result: Any) -> tuple[str, str]:
    assert result.is_error
    text = result.content[0].text
    error = result.structured_content["error"]
    assert text == f"{error['code']}: {error['message']}"  # the text starts with the code
    return error["code"], text


def test_paths_outside_the_roots_are_refused_before_reading(layout: Path) -> None:
    work = layout / "work"
    refused = ["/etc/passwd", "../outside/greeting.yaml", str(layout / "outside/greeting.yaml")]
    calls = [("compile_contract", {"contract": "greeting.yaml", **ARGS})]
    calls += [("compile_contract", {"contract": path, **ARGS}) for path in refused]
    calls += [
        ("compile_contract", {"contract": "escape.yaml", **ARGS}),  # a symlink leading out
        ("execute_contract", {"contract": "/etc/passwd", **ARGS, "fixture_output": {}}),
        ("compile_contract", {"contract": "greeting\x00.yaml", **ARGS}),
    ]
    inside, *rest = call_all(work, calls)
    assert not inside.is_error
    assert inside.structured_content["ok"] is True
    for result in rest:
        code, text = error_of(result)
        assert code == "TQX_PATH_INVALID", text
        assert "root:" not in text  # nothing of /etc/passwd was read


def test_configured_roots_widen_the_confinement(layout: Path) -> None:
    env = {"TEMPLIQX_MCP_ROOTS": str(layout / "outside")}
    calls = [
        ("compile_contract", {"contract": "../outside/greeting.yaml", **ARGS}),
        ("compile_contract", {"contract": "escape.yaml", **ARGS}),
        ("compile_contract", {"contract": "/etc/passwd", **ARGS}),
    ]
    outside, escape, passwd = call_all(layout / "work", calls, env=env)
    assert outside.structured_content["ok"] is True
    assert escape.structured_content["ok"] is True
    assert error_of(passwd)[0] == "TQX_PATH_INVALID"


def test_a_cassette_outside_the_roots_fails_at_start(layout: Path) -> None:
    args = ("--runtime", "langfuse", "--replay", "../outside/cassette.yaml")
    assert "TQX_PATH_INVALID" in failed_start(*args, cwd=layout / "work")


def test_every_tool_error_starts_with_its_code(layout: Path) -> None:
    calls = [
        ("compile_contract", {"contract": "missing.yaml"}),
        ("compile_contract", {"contract": "x" * 100_000}),  # too long for the file system
        ("compile_contract", {"contract": "greeting.yaml", "inputs": "not an object"}),
        ("execute_contract", {"contract": 42}),
        ("no_such_tool", {}),
        ("compile_contract", {"contract": "greeting.yaml", **ARGS}),
    ]
    missing, too_long, bad_inputs, bad_contract, unknown, good = call_all(layout / "work", calls)
    assert error_of(missing)[0] == "TQX_NOT_FOUND"
    assert error_of(too_long)[0] == "TQX_PATH_INVALID"
    assert len(error_of(too_long)[1]) < 1000  # the path is not echoed back
    assert error_of(bad_inputs)[0] == "TQX_DATA_INVALID"
    assert error_of(bad_contract)[0] == "TQX_DATA_INVALID"
    assert "42" not in error_of(bad_contract)[1]  # field names, never the caller's values
    assert error_of(unknown)[0] == "TQX_NOT_FOUND"
    assert good.structured_content["ok"] is True  # and the server keeps serving


def test_every_tool_parameter_is_described(layout: Path) -> None:
    async def scenario() -> Any:
        async with session("--runtime", "scripted", cwd=layout / "work") as client:
            return (await client.list_tools()).tools

    tools = anyio.run(scenario)
    assert {tool.name for tool in tools} == {"compile_contract", "execute_contract"}
    for tool in tools:
        properties = tool.input_schema["properties"]
        assert properties
        for name, schema in properties.items():
            assert len(schema.get("description", "")) > 20, (tool.name, name)


def test_a_huge_contract_in_the_roots_is_refused_before_it_is_parsed(layout: Path) -> None:
    """An agent naming a large YAML file in the roots: 47 MB of mappings took 196 s and
    6.7 GB to parse; a contract file is read up to its bound and refused past it."""
    work = layout / "work"
    with (work / "huge.yaml").open("w", encoding="utf-8") as out:
        out.write("api_version: templiqx/v1alpha1\nid: huge\nversion: 1.0.0\nprovenance:\n")
        out.writelines(f"  k{n}: [a, {{b: c}}]\n" for n in range(250_000))  # ~5.5 MB
    started = time.monotonic()
    (compiled, executed) = call_all(
        work,
        [
            ("compile_contract", {"contract": "huge.yaml", **ARGS}),
            ("execute_contract", {"contract": "huge.yaml", **ARGS, "fixture_output": {}}),
        ],
    )
    assert time.monotonic() - started < 10
    for result in (compiled, executed):
        envelope = result.structured_content
        assert envelope["ok"] is False
        (diagnostic,) = envelope["diagnostics"]
        assert diagnostic["code"] == "TQX_DATA_INVALID"
        assert "contract file is longer than" in diagnostic["message"]
