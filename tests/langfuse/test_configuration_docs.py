"""Every ``python`` example in ``docs/configuration.md`` runs as written."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT

PAGE = REPO_ROOT / "docs" / "configuration.md"
EXAMPLES = re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.M | re.S)


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("source", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_example_runs(source: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(source, str(PAGE), "exec"), {"__name__": "docs_example"})
    printed = capsys.readouterr().out
    for line in re.findall(r"^# (/\S+: .*?) \(", source, re.M):  # shown output is real
        assert line.split(" ...")[0] in printed
