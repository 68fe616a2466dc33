"""Every ```python block of the README, the docs site and cassettes/README.md runs as written.

A page's plain blocks run in order in one namespace (a page is read top to bottom) in a
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
from tests.testing.conftest import DOC_PAGES, file_blocks, python_blocks, readme_block

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


PAGES = [*DOC_PAGES, REPO_ROOT / "cassettes" / "README.md"]
#: Pages whose examples need a service of their own run in their own test.
OWN_RUNNER = {"langfuse-prompts.md": "tests/langfuse/test_prompts_docs.py (a Langfuse prompt API)"}
RUNNABLE = [
    p
    for p in DOC_PAGES
    if p.name not in OWN_RUNNER and any(not is_pytest_block(b) for b in python_blocks(p))
]


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO_ROOT))


@pytest.mark.parametrize("page", RUNNABLE, ids=page_id)
def test_page_blocks_run(page: Path, tmp_path: Path, model_server: LoopbackModelServer) -> None:
    plain = [b for b in python_blocks(page) if not is_pytest_block(b)]
    for name in named_files(plain):  # laid out as in the repository (a reader's clone)
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO_ROOT / name, tmp_path / name)
    with otlp_receiver() as receiver:
        env = {
            **os.environ,
            # as in the reader's activated virtualenv: its console scripts are on PATH
            "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]),
            "TEMPLIQX_MODEL_BASE_URL": model_server.base_url,
            "TEMPLIQX_MODEL_API_KEY": "sk-readme-0123456789",
            "TEMPLIQX_MODEL": "readme-model",
            "LANGFUSE_PUBLIC_KEY": "pk-lf-readme",
            "LANGFUSE_SECRET_KEY": "sk-lf-readme",
            "LANGFUSE_BASE_URL": receiver.base_url,
        }
        run_blocks(plain, tmp_path, env)


def test_the_readme_calls_the_model_and_traces() -> None:
    """The README's host example is a real call, traced (run by ``test_page_blocks_run``)."""
    (host,) = [b for b in python_blocks(REPO_ROOT / "README.md") if "execute_traced" in b]
    assert "LangfuseTracedRuntime.from_env()" in host


def test_the_docs_site_has_every_page_in_its_nav() -> None:
    nav = (REPO_ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in (REPO_ROOT / "docs").glob("*.md"):
        assert f" {page.name}" in nav, page.name


@pytest.mark.parametrize("page", [REPO_ROOT / "README.md", *PAGES], ids=page_id)
def test_every_code_fence_a_page_opens_it_closes(page: Path) -> None:
    """A stray fence turns the rest of a page into one code block (docs/cli.md had one)."""
    fences = [
        line for line in page.read_text("utf-8").splitlines() if line.lstrip().startswith("```")
    ]
    assert len(fences) % 2 == 0, f"{page.name}: {len(fences)} fence lines"


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_every_file_a_snippet_names_is_in_the_repository(page: Path) -> None:
    """A reader runs the snippets from a clone: the contract they name must be there."""
    names = named_files(python_blocks(page))
    assert [name for name in sorted(names) if not (REPO_ROOT / name).is_file()] == []


def test_pytest_blocks_are_the_host_project() -> None:
    """Pytest blocks are executed by ``test_record_modes`` and ``test_async_recipe`` (as a
    host's conftest and tests); any other would run nowhere."""
    pytest_blocks = {b for p in DOC_PAGES for b in python_blocks(p) if is_pytest_block(b)}
    assert pytest_blocks == {
        readme_block("def test_greeting("),
        readme_block("def vcr_config("),
        readme_block("async def test_greet_endpoint("),
    }


def test_cassettes_readme_blocks_run() -> None:
    blocks = python_blocks(REPO_ROOT / "cassettes" / "README.md")
    assert blocks
    assert not any(is_pytest_block(b) for b in blocks)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    run_blocks(blocks, REPO_ROOT, env)


@pytest.mark.parametrize("page", PAGES, ids=page_id)
def test_extraction_sees_every_python_fence(page: Path) -> None:
    seen = [*python_blocks(page), *python_blocks(page, schematic=True), *file_blocks(page)]
    assert len(seen) == page.read_text().count("```python\n")


def test_file_blocks_are_the_files_they_show() -> None:
    """The FastAPI service shown in the docs is the example file (run by test_fastapi_example)."""
    shown = {k: v for p in DOC_PAGES for k, v in file_blocks(p).items()}
    assert "examples/fastapi_app/app.py" in shown
    for name, code in shown.items():
        assert code == (REPO_ROOT / name).read_text(encoding="utf-8"), name


def test_schematic_blocks_compile_and_their_imports_resolve() -> None:
    """A template cannot run (its names are the reader's), but it parses and imports."""
    schematic = [b for p in DOC_PAGES for b in python_blocks(p, schematic=True)]
    # the conformance-kit template and the load of a contract a Langfuse project holds
    assert len(schematic) <= 2
    for block in schematic:
        tree = ast.parse(block)
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        assert imports
        exec(compile(ast.Module(body=imports, type_ignores=[]), "<imports>", "exec"), {})


def test_the_readme_shows_the_example_contract_as_it_is() -> None:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    shown = readme.split("<!-- snippet: file examples/greeting.yaml -->\n```yaml\n")[1]
    contract = (REPO_ROOT / "examples" / "greeting.yaml").read_text(encoding="utf-8")
    assert shown.split("```")[0] == contract
