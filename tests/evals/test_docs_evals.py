"""``docs/evals.md``: every python example runs as written, and its shell example too."""

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


@pytest.mark.parametrize("source", _blocks("python"))
def test_the_python_examples_run(source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO_ROOT)
    with contextlib.redirect_stdout(io.StringIO()):
        exec(compile(source, str(DOC), "exec"), {"__name__": "docs_example"})


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
