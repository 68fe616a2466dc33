"""``docs/typed-contracts.md`` and ``docs/cassette-rules.md``: each page's python blocks
run, in order, in one namespace per page."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO_ROOT


@pytest.mark.parametrize(("page", "blocks"), [("typed-contracts.md", 6), ("cassette-rules.md", 1)])
def test_the_python_examples_run(page: str, blocks: int) -> None:
    doc = REPO_ROOT / "docs" / page
    found = re.findall(r"^```python\n(.*?)^```", doc.read_text("utf-8"), re.M | re.S)
    assert len(found) == blocks
    namespace: dict[str, object] = {"__name__": page.removesuffix(".md").replace("-", "_")}
    for index, block in enumerate(found):
        exec(compile(block, f"{page}[{index}]", "exec", dont_inherit=True), namespace)
