"""A contract published to Langfuse is served by the MCP server by its reference
(``langfuse:NAME@LABEL``), which an installed contract source answers: no path, so not
confined; every path, whatever scheme it seems to start with, still is."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from templiqx_langfuse import LangfuseConfig, publish_contract
from tests.langfuse.fake_prompts import PUBLIC_KEY, SECRET_KEY, FakePromptApi, clear_cache
from tests.mcp.test_mcp_hostile import error_of
from tests.mcp.test_mcp_server import session

HERE = Path(__file__).parent
CONTRACT = HERE.parent / "langfuse" / "support.yaml"
NAME = "support-triage"
ARGS = {"inputs": {"tier": "gold", "ticket": " refund "}, "context": {"org": "Acme"}}


@pytest.fixture
def fake() -> Iterator[FakePromptApi]:
    clear_cache()
    with FakePromptApi() as api:
        config = LangfuseConfig(
            public_key=PUBLIC_KEY, secret_key=SECRET_KEY, base_url=api.base_url, timeout_s=2.0
        )
        publish_contract(CONTRACT, labels=["staging"], config=config)
        yield api
    clear_cache()
    assert not api.refused, api.refused


def call_all(fake: FakePromptApi, cwd: Path, calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    env = {
        "LANGFUSE_PUBLIC_KEY": PUBLIC_KEY,
        "LANGFUSE_SECRET_KEY": SECRET_KEY,
        "LANGFUSE_BASE_URL": fake.base_url,
    }

    async def scenario() -> list[Any]:
        async with session("--runtime", "scripted", cwd=cwd, env=env) as client:
            return [await client.call_tool(name, args) for name, args in calls]

    return anyio.run(scenario)


def test_a_langfuse_reference_compiles_and_executes_as_its_file_does(
    fake: FakePromptApi, tmp_path: Path
) -> None:
    shutil.copy(CONTRACT, tmp_path / "support.yaml")
    execute = {**ARGS, "fixture_output": {"queue": "billing"}}
    published = fake.gets()
    results = call_all(
        fake,
        tmp_path,
        [
            ("compile_contract", {"contract": "support.yaml", **ARGS}),
            ("compile_contract", {"contract": f"langfuse:{NAME}@staging", **ARGS}),
            ("compile_contract", {"contract": f"langfuse:{NAME}#1", **ARGS}),
            ("execute_contract", {"contract": "support.yaml", **execute}),
            ("execute_contract", {"contract": f"langfuse:{NAME}@staging", **execute}),
        ],
    )
    envelopes = []
    for result in results:
        assert not result.is_error, result.content
        assert result.structured_content["ok"] is True, result.structured_content
        envelopes.append(result.content[0].text)
    file, by_label, by_version, executed_file, executed_reference = envelopes
    assert file == by_label == by_version  # fingerprints and all
    assert executed_file == executed_reference
    assert fake.gets() - published == 2  # the label and the version, each fetched once


def test_a_missing_prompt_is_a_diagnostic_and_paths_stay_confined(
    fake: FakePromptApi, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(CONTRACT, tmp_path / "support.yaml")  # outside the server's roots
    missing, *paths = call_all(
        fake,
        work,
        [
            ("compile_contract", {"contract": f"langfuse:{NAME}@nope", **ARGS}),
            # No installed source answers these schemes: paths, confined as any other.
            ("compile_contract", {"contract": "nosuch:../../../support.yaml", **ARGS}),
            ("compile_contract", {"contract": "../support.yaml", **ARGS}),
            ("execute_contract", {"contract": "s3://bucket/../../support.yaml", **ARGS}),
        ],
    )
    assert not missing.is_error
    envelope = missing.structured_content
    assert envelope["ok"] is False
    assert [d["code"] for d in envelope["diagnostics"]] == ["TQX_NOT_FOUND"]
    # (the last one resolves to work/support.yaml: inside, and no such file)
    expected = ["TQX_PATH_INVALID", "TQX_PATH_INVALID", "TQX_NOT_FOUND"]
    assert [error_of(result)[0] for result in paths] == expected
