"""Every ```python block of README.md and cassettes/README.md runs as written.

Plain blocks run in order in one namespace (the README is read top to bottom) in a
subprocess against a loopback model server and a loopback Langfuse receiver; pytest
blocks (a test, a conftest) are the scratch host project of ``test_record_modes``.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT
from tests.loopback import LoopbackModelServer
from tests.otlp_receiver import otlp_receiver
from tests.testing.conftest import file_blocks, python_blocks, readme_block

RUNNER = """
import json, sys, traceback
namespace = {"__name__": "__readme__"}
for index, block in enumerate(json.load(sys.stdin)):
    try:
        exec(compile(block, f"<block {index}>", "exec"), namespace)
    except BaseException:
        traceback.print_exc()
        sys.exit(f"block {index} failed:\\n{block}")
"""


_RELATIVE_FILE = r"[\w.-]+(/[\w.-]+)+\.(yaml|yml|json)"


def named_files(blocks: list[str]) -> set[str]:
    """Relative contract/cassette/data paths the blocks name as string literals."""
    names = set()
    for block in blocks:
        for node in ast.walk(ast.parse(block)):
            value = node.value if isinstance(node, ast.Constant) else None
            if isinstance(value, str) and re.fullmatch(_RELATIVE_FILE, value):
                names.add(value)
    return names


def is_pytest_block(block: str) -> bool:
    return "def test_" in block or "@pytest.fixture" in block


def run_blocks(blocks: list[str], cwd: Path, env: dict[str, str]) -> None:
    result = subprocess.run(
        [sys.executable, "-c", RUNNER],
        input=json.dumps(blocks),
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_readme_blocks_run(tmp_path: Path, model_server: LoopbackModelServer) -> None:
    blocks = python_blocks(REPO_ROOT / "README.md")
    plain = [b for b in blocks if not is_pytest_block(b)]
    assert len(plain) >= 3
    for name in named_files(plain):  # laid out as in the repository (a reader's clone)
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    with otlp_receiver() as receiver:
        env = {
            **os.environ,
            "TEMPLIQX_MODEL_BASE_URL": model_server.base_url,
            "TEMPLIQX_MODEL_API_KEY": "sk-readme-0123456789",
            "TEMPLIQX_MODEL": "readme-model",
            "LANGFUSE_PUBLIC_KEY": "pk-lf-readme",
            "LANGFUSE_SECRET_KEY": "sk-lf-readme",
            "LANGFUSE_BASE_URL": receiver.base_url,
        }
        run_blocks(plain, tmp_path, env)
    assert model_server.requests  # the snippets really called the (loopback) model
    assert receiver.spans  # ... and traced to the (loopback) Langfuse


@pytest.mark.parametrize("readme", ["README.md", "cassettes/README.md"])
def test_every_file_a_snippet_names_is_in_the_repository(readme: str) -> None:
    """A reader runs the snippets from a clone: the contract they name must be there."""
    names = named_files(python_blocks(REPO_ROOT / readme))
    assert [name for name in sorted(names) if not (REPO_ROOT / name).is_file()] == []
    if readme == "README.md":
        assert "examples/greeting.yaml" in names


def test_readme_pytest_blocks_are_the_host_project() -> None:
    """Pytest blocks are executed by ``test_record_modes`` and ``test_async_recipe`` (as a
    host's conftest and tests)."""
    pytest_blocks = [b for b in python_blocks(REPO_ROOT / "README.md") if is_pytest_block(b)]
    assert pytest_blocks == [
        readme_block("def test_greeting("),
        readme_block("def vcr_config("),
        readme_block("async def test_greet_endpoint("),
    ]


def test_cassettes_readme_blocks_run() -> None:
    blocks = python_blocks(REPO_ROOT / "cassettes" / "README.md")
    assert blocks
    assert not any(is_pytest_block(b) for b in blocks)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    run_blocks(blocks, REPO_ROOT, env)


@pytest.mark.parametrize("readme", ["README.md", "cassettes/README.md"])
def test_extraction_sees_every_python_fence(readme: str) -> None:
    path = REPO_ROOT / readme
    seen = [*python_blocks(path), *python_blocks(path, schematic=True), *file_blocks(path)]
    assert len(seen) == path.read_text().count("```python\n")


def test_file_blocks_are_the_files_they_show() -> None:
    """The README's FastAPI service is the example file (run by test_fastapi_example)."""
    shown = file_blocks(REPO_ROOT / "README.md")
    assert "examples/fastapi_app/app.py" in shown
    for name, code in shown.items():
        assert code == (REPO_ROOT / name).read_text(encoding="utf-8"), name


def test_schematic_blocks_compile_and_their_imports_resolve() -> None:
    """A template cannot run (its names are the reader's), but it parses and imports."""
    schematic = python_blocks(REPO_ROOT / "README.md", schematic=True)
    assert len(schematic) <= 1  # the conformance-kit template; keep it the exception
    for block in schematic:
        tree = ast.parse(block)
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert imports
        exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), {})
