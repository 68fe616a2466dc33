"""``docs/repair.md`` runs as written: its ``python`` blocks, in order, in one namespace
(a later block uses what an earlier one defined), from the repository root."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "repair.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def test_the_python_examples_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    blocks = [body for kind, body in FENCE.findall(DOC.read_text("utf-8")) if kind == "python"]
    assert len(blocks) == 3
    namespace: dict[str, object] = {}
    for index, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name}[python {index}]", "exec"), namespace)


def test_the_command_line_example_names_files_that_exist() -> None:
    text = DOC.read_text("utf-8")
    command = text[text.index("templiqx execute") : text.index("--repair 3")]
    for path in re.findall(r"examples/\S+", command):
        assert (REPO_ROOT / path).is_file(), path
