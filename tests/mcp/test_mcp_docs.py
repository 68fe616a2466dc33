"""``docs/mcp.md`` as a reader uses it: its Python runs as written, its JSON parses."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

PAGE = (REPO_ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = [(m.group(1), m.group(2)) for m in FENCE.finditer(PAGE)]


def test_the_python_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    examples = [code for language, code in BLOCKS if language == "python"]
    assert examples
    monkeypatch.chdir(REPO_ROOT)  # where the page says to run them
    bin_dir = str(Path(sys.executable).parent)  # as in an activated virtualenv
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    for code in examples:
        exec(compile(code, "docs/mcp.md", "exec"), {"__name__": "docs_mcp"})


def test_the_agent_configuration_is_json() -> None:
    (config,) = [code for language, code in BLOCKS if language == "json"]
    assert json.loads(config)["mcpServers"]["templiqx"]["args"][0] == "mcp"
