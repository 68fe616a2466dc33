from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

Run = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def run_cli() -> Run:
    """Run the real ``templiqx`` console script as a subprocess (no network, no keys)."""
    script = Path(sys.executable).with_name("templiqx")

    def run(
        *args: str, env: dict[str, str] | None = None, memory_cap: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``memory_cap`` bytes of address space: a runaway allocation dies instead of swapping."""
        clean = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("LANGFUSE_", "TEMPLIQX_", "OPENAI_"))
        }
        return subprocess.run(
            [str(script), *args],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**clean, **(env or {})},
            preexec_fn=None if memory_cap is None else lambda: _cap_memory(memory_cap),
            check=False,
        )

    return run


def _cap_memory(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
