"""``docs/langfuse-prompts.md``: its Python examples run, in order, against the loopback
prompt API, and print what their comments say."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

from .fake_prompts import PUBLIC_KEY, SECRET_KEY, FakePromptApi, clear_cache

DOC = REPO_ROOT / "docs" / "langfuse-prompts.md"
FENCE = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
PRINTED = re.compile(r"^ *print\(.*\)  # (.+)$", re.MULTILINE)


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[FakePromptApi]:
    clear_cache()
    with FakePromptApi() as api:
        monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
        monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
        monkeypatch.setenv("LANGFUSE_BASE_URL", api.base_url)
        shutil.copy(Path(__file__).with_name("support.yaml"), tmp_path / "support.yaml")
        monkeypatch.chdir(tmp_path)
        yield api
    clear_cache()
    assert not api.refused


def test_the_python_examples_run_and_print_what_they_say(fake: FakePromptApi) -> None:
    blocks = FENCE.findall(DOC.read_text("utf-8"))
    assert len(blocks) >= 3
    namespace: dict[str, object] = {}
    for block in blocks:
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(block, str(DOC), "exec"), namespace)
        assert printed.getvalue().splitlines() == PRINTED.findall(block)
    assert fake.labelled("support-triage", "staging") == 1
