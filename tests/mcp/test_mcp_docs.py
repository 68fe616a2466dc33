"""``docs/mcp.md``: its agent configuration parses (its Python runs in
``tests/testing/test_docs_snippets.py``, as every page's)."""

from __future__ import annotations

import json
import re

from tests.conftest import REPO_ROOT

PAGE = (REPO_ROOT / "docs" / "mcp.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.MULTILINE | re.DOTALL)
BLOCKS = [(m.group(1), m.group(2)) for m in FENCE.finditer(PAGE)]


def test_the_agent_configuration_is_json() -> None:
    (config,) = [code for language, code in BLOCKS if language == "json"]
    assert json.loads(config)["mcpServers"]["templiqx"]["args"][0] == "mcp"
