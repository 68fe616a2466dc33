"""``examples/triage/``: the triage service written both ways. This package's way is the
shorter one (the count script), and each way's recorded tests replay offline."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT

TRIAGE = REPO_ROOT / "examples" / "triage"


def test_this_package_s_way_is_shorter_and_writes_the_output_shape_once(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert runpy.run_path(str(TRIAGE / "count_lines.py"))["main"]() == 0
    shown = capsys.readouterr().out
    assert "templiqx_way in all" in shown
    assert "conventional in all" in shown


def test_the_recorded_tests_of_both_ways_replay_offline() -> None:
    ways = ["templiqx_way", "conventional"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "OPENAI_"))}
    offline = ["--block-network", "--record-mode=none"]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", *offline]
        + [str(TRIAGE / way) for way in ways],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert f"{3 * len(ways)} passed" in result.stdout
