"""``docs/repair.md``'s command line names files that exist (its ``python`` blocks run in
``tests/testing/test_docs_snippets.py``, as every page's)."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "repair.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_command_line_example_names_files_that_exist() -> None:
    text = DOC.read_text("utf-8")
    command = text[text.index("templiqx execute") : text.index("--repair 3")]
    for path in re.findall(r"examples/\S+", command):
        assert (REPO_ROOT / path).is_file(), path
