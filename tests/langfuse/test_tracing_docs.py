"""Every ``python`` example of ``docs/langfuse-tracing.md`` runs, each in a fresh
interpreter (they set process-wide state: signal handlers, environment variables)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

DOC = REPO_ROOT / "docs" / "langfuse-tracing.md"
EXAMPLES = re.findall(r"^```python\n(.*?)^```", DOC.read_text("utf-8"), re.M | re.S)


def test_the_page_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("source", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_each_example_runs(source: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", source],
        capture_output=True, text=True, timeout=60, cwd=REPO_ROOT, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
