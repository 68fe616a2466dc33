"""Shared fixtures: where the reference data lives, and helpers every layer uses."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TEMPLIQX_SHARED", REPO_ROOT.parent / "shared"))
REFERENCE = SHARED / "reference"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.fail(f"reference data not found at {SHARED} (set TEMPLIQX_SHARED)")
    return SHARED


@pytest.fixture(scope="session")
def reference_dir(shared_dir: Path) -> Path:
    return shared_dir / "reference"


def read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))
