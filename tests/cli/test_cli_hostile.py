"""``templiqx fingerprint`` on hostile documents: refused as data, never an internal error."""

from __future__ import annotations

from pathlib import Path

import pytest

from templiqx_core import InvalidData
from templiqx_core._loading import load_document
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


# 352 bytes, nine levels of ten aliases each: 10^9 nodes once expanded ("billion laughs").
BOMB = (
    "a: &a ["
    + ",".join(['"x"'] * 10)
    + "]\n"
    + "".join(
        f"{name}: &{name} [" + ",".join([f"*{prev}"] * 10) + "]\n"
        for prev, name in zip("abcdefgh", "bcdefghi", strict=True)
    )
)


GIB = 1 << 30


@pytest.mark.parametrize("command", ["fingerprint", "compile --inputs", "execute --replay"])
def test_yaml_alias_bomb_is_refused_as_data(command: str, run_cli: Run, tmp_path: Path) -> None:
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text(BOMB, encoding="utf-8")
    assert len(BOMB.encode()) < 400
    args = {
        "fingerprint": ["fingerprint", str(bomb)],
        "compile --inputs": ["compile", "examples/greeting.yaml", "--inputs", str(bomb)],
        "execute --replay": [
            *("execute", "examples/greeting.yaml", "--runtime", "langfuse"),
            *("--replay", str(bomb)),
        ],
    }[command]
    result = run_cli(*args, memory_cap=GIB)  # an expansion would die here
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert "aliases expand past the limit" in lines[0] or "not a cassette" in lines[0]


def test_yaml_alias_bomb_in_a_contract_is_a_parse_diagnostic(run_cli: Run, tmp_path: Path) -> None:
    contract = tmp_path / "contract.yaml"
    contract.write_text(BOMB, encoding="utf-8")
    result = run_cli("compile", str(contract), memory_cap=GIB)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "TQX_PARSE_YAML" in result.stderr
    assert "aliases expand past the limit" in result.stderr


def test_modest_alias_reuse_and_cycles(tmp_path: Path) -> None:
    """Anchors reused a few times still load; a self-referencing anchor is refused."""
    path = tmp_path / "x.yaml"
    path.write_text("a: &a [1, 2]\nb: *a\nc: *a\n", encoding="utf-8")
    assert load_document(path) == {
        "a": [1, 2],
        "b": [1, 2],
        "c": [1, 2],
    }
    path.write_text("a: &a [*a]\n", encoding="utf-8")
    with pytest.raises(InvalidData, match="refers to its own anchor"):
        load_document(path)


BAD_CASSETTES = {
    "undecodable bytes": b"\xff\xfe\x00bad",
    "no interactions": b"version: 1\n",
    "request is a number": b"interactions: [{request: 5}]\n",
    "response missing": b"interactions: [{request: {method: P, uri: u, body: b, headers: {}}}]\n",
    # well-shaped pairs that vcrpy itself cannot load
    "headers are text": b"interactions: [{request: {method: P, uri: u, body: b, headers: abc},"
    b" response: {status: {code: 200}, headers: {}, body: {string: ''}}}]\n",
    "response body is a number": b"interactions: [{request: {method: P, uri: u, body: b,"
    b" headers: {}}, response: {status: {code: 200}, headers: {}, body: 5}}]\n",
}


@pytest.mark.parametrize("content", BAD_CASSETTES.values(), ids=BAD_CASSETTES.keys())
def test_a_bad_cassette_is_one_data_line(content: bytes, run_cli: Run, tmp_path: Path) -> None:
    cassette = tmp_path / "bad.yaml"
    cassette.write_bytes(content)
    result = run_cli(
        *("execute", "examples/greeting.yaml", "--runtime", "langfuse", "--replay", str(cassette))
    )
    assert result.returncode == 1, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-2000:]
    assert "TQX_DATA_INVALID" in lines[0]
    assert "internal error" not in lines[0]
