"""``docs/evals.md``: its shell example runs as written (its python examples run in
``tests/testing/test_docs_snippets.py``, as every page's)."""

from __future__ import annotations

import contextlib
import io
import re
import shlex

import pytest

from templiqx_core._cli import main
from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "evals.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _blocks(language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(DOC.read_text("utf-8")) if lang == language]


@pytest.mark.parametrize("line", _blocks("shell"))
def test_the_shell_example_runs(line: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    for name in ("LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
        monkeypatch.delenv(name, raising=False)
    command = shlex.split(line)
    assert command[0] == "templiqx"
    with contextlib.redirect_stdout(io.StringIO()) as out:
        assert main(command[1:]) == 0
    assert '"passed": 1' in out.getvalue() or '"passed":1' in out.getvalue()
