"""``templiqx fingerprint`` on hostile documents: refused as data, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.conftest import Run

DEEP = "[" * 10_000 + "]" * 10_000

DOCUMENTS = {
    "10 000-deep JSON": ("deep.json", DEEP, "nested too deeply"),
    "10 000-deep YAML": ("deep.yaml", DEEP, "nesting depth"),
    "lone surrogate": ("surrogate.json", '"\\ud800"', "lone surrogate"),
    "lone surrogate in a key": ("key.json", '{"\\udfff": 1}', "lone surrogate"),
}


@pytest.mark.parametrize(("name", "text", "why"), DOCUMENTS.values(), ids=DOCUMENTS.keys())
def test_hostile_documents_fail_as_data(
    name: str, text: str, why: str, run_cli: Run, tmp_path: Path
) -> None:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    result = run_cli("fingerprint", str(path))
    assert result.returncode == 1, result.stderr
    assert why in result.stderr
    assert "internal error" not in result.stderr
    assert "Traceback" not in result.stderr


def test_huge_integer_literals_fingerprint(run_cli: Run, tmp_path: Path) -> None:
    """Canonical JSON writes integers exactly, however large (as serde_json does)."""
    path = tmp_path / "big.json"
    path.write_text('{"n": 123456789012345678901234567890123}', encoding="utf-8")
    result = run_cli("fingerprint", str(path), "--json")
    assert result.returncode == 0, result.stderr
    assert '"ok":true' in result.stdout.replace(" ", "")
