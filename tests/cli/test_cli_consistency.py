"""The console script in a real process: each way of naming the same input ends the same
way (exit code, stdout, stderr) whatever the flag that points at it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

GREETING = REPO_ROOT / "examples" / "greeting.yaml"


def templiqx(*args: str | Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("templiqx")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    return subprocess.run(
        [str(script), *map(str, args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


@pytest.mark.parametrize("broken", ["unparsable", "missing"])
@pytest.mark.parametrize(
    "command", [("compile",), ("execute", "--runtime", "scripted")], ids=["compile", "execute"]
)
def test_eval_of_an_uncompilable_contract_prints_its_diagnostics_as_without_eval(
    tmp_path: Path, broken: str, command: tuple[str, ...]
) -> None:
    contract = tmp_path / "greeting.yaml"
    if broken == "unparsable":
        contract.write_text(GREETING.read_text().replace("messages:", "mesages:"))
    plain = templiqx(command[0], contract, *command[1:], "--json")
    assert plain.returncode == 2, plain.stderr
    with_eval = templiqx(command[0], contract, "--eval", "ryan", "--json")
    assert (with_eval.returncode, with_eval.stdout, with_eval.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )
