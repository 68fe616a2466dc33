from __future__ import annotations

import logging
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from templiqx_core._cli import main
from tests.conftest import REPO_ROOT

Run = Callable[..., subprocess.CompletedProcess[str]]
_HOST_ENV = ("LANGFUSE_", "TEMPLIQX_", "OPENAI_")


@pytest.fixture
def run_cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Run:
    """Run ``templiqx`` as its console script would (no network, no keys): in this process,
    where a subprocess adds only its start-up; as the real script in a subprocess when the
    run needs a process of its own (``memory_cap``)."""
    script = Path(sys.executable).with_name("templiqx")

    def run(
        *args: str, env: dict[str, str] | None = None, memory_cap: int | None = None
    ) -> subprocess.CompletedProcess[str]:
        """``memory_cap`` bytes of address space: a runaway allocation dies instead of swapping."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith(_HOST_ENV)}
        if memory_cap is not None:
            return subprocess.run(
                [str(script), *args],
                cwd=REPO_ROOT,
                capture_output=True,
                text=True,
                timeout=120,
                env={**clean, **(env or {})},
                preexec_fn=lambda: _cap_memory(memory_cap),
                check=False,
            )
        root = logging.getLogger()
        level = root.level
        with monkeypatch.context() as patch:
            # As in a fresh process: the CLI's logging.basicConfig installs its stderr line.
            patch.setattr(root, "handlers", [])
            for name in set(os.environ) - set(clean):
                patch.delenv(name)
            for name, value in (env or {}).items():
                patch.setenv(name, value)
            patch.chdir(REPO_ROOT)
            capsys.readouterr()
            try:
                code = main(list(args))
            except SystemExit as exit:  # argparse's usage errors
                code = exit.code if isinstance(exit.code, int) else 1
            finally:
                root.setLevel(level)
            out, err = capsys.readouterr()
        return subprocess.CompletedProcess([str(script), *args], code, out, err)

    return run


def _cap_memory(limit: int) -> None:
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
