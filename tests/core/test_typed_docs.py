"""``docs/typed-contracts.md``: its python blocks run, in order, in one namespace."""

from __future__ import annotations

import re

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "typed-contracts.md"


def test_the_python_examples_run() -> None:
    blocks = re.findall(r"^```python\n(.*?)^```", DOC.read_text("utf-8"), re.M | re.S)
    assert len(blocks) >= 4
    namespace: dict[str, object] = {"__name__": "typed_contracts_doc"}
    for index, block in enumerate(blocks):
        exec(compile(block, f"{DOC.name}[{index}]", "exec", dont_inherit=True), namespace)
