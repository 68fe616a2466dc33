"""YAML aliases are bounded by the bytes they expand to, not only by nodes: a 50 KB
document reusing one long string through aliases (4 GB once serialized) is a located
``TQX_PARSE_YAML`` before memory grows — for contracts, inputs, documents the CLI
fingerprints and cassettes — in a real ``templiqx`` process under a 1 GiB address-space
cap (before: SIGSEGV, or a Rust allocation abort)."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest

from templiqx_core import codes
from templiqx_core._loading import MAX_ALIAS_EXPANSION_BYTES, load_document
from tests.conftest import REFERENCE, REPO_ROOT

CAP = 1 << 30  # bytes of address space for the CLI process
LONG = "x" * 50_000


def bomb_lines(indent: str = "") -> list[str]:
    """A mapping whose aliases stay far below the node bound (about 81 000 nodes) and
    expand to 80 800 copies of a 50 000-character string."""
    return [
        f'{indent}big: &s "{LONG}"',
        f"{indent}l1: &l1 [" + ", ".join(["*s"] * 100) + "]",
        f"{indent}l2: &l2 [" + ", ".join(["*l1"] * 100) + "]",
        f"{indent}l3: [" + ", ".join(["*l2"] * 8) + "]",
    ]


def capped() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))


def templiqx(*args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    started = time.monotonic()
    done = subprocess.run(
        [str(Path(sys.executable).with_name("templiqx")), *args],
        cwd=REPO_ROOT, env=clean, capture_output=True, text=True, timeout=120,
        preexec_fn=capped, check=False,
    )  # fmt: skip
    return done, time.monotonic() - started


def assert_located_refusal(done: subprocess.CompletedProcess[str], took: float) -> None:
    assert done.returncode in (1, 2), (done.returncode, done.stderr[-500:])  # not a signal
    assert "Traceback" not in done.stderr
    assert codes.PARSE_YAML in done.stderr, done.stderr
    assert "aliases expand past" in done.stderr
    assert took < 20.0


def test_fingerprint_refuses_an_alias_bomb_of_long_strings(tmp_path: Path) -> None:
    document = tmp_path / "bomb.yaml"
    document.write_text("\n".join(bomb_lines()) + "\n", "utf-8")
    done, took = templiqx("fingerprint", str(document))
    assert_located_refusal(done, took)
    assert "at line 3 column 5" in done.stderr  # where l2 passes the budget


def test_compile_refuses_a_contract_carrying_an_alias_bomb(tmp_path: Path) -> None:
    text = (REFERENCE / "demo" / "greeting.yaml").read_text("utf-8")
    lines = bomb_lines("      ")
    lines[0] = "    - " + lines[0].lstrip()
    contract = tmp_path / "contract.yaml"
    contract.write_text(
        text.replace(
            "output_schema:\n  type: object\n",
            "output_schema:\n  type: object\n  examples:\n" + "\n".join(lines) + "\n",
            1,
        ),
        "utf-8",
    )
    done, took = templiqx("compile", "--eval", "ryan", str(contract))
    assert_located_refusal(done, took)
    assert f"{contract}:" in done.stderr  # file:line:column


@pytest.mark.parametrize("kind", ["inputs", "cassette"])
def test_inputs_and_cassettes_are_refused_the_same_way(kind: str, tmp_path: Path) -> None:
    inputs = tmp_path / "inputs.yaml"
    context = tmp_path / "context.yaml"
    context.write_text("organization: Blinqx\n", "utf-8")
    greeting = str(REFERENCE / "demo" / "greeting.yaml")
    if kind == "inputs":
        inputs.write_text("name: Ryan\n" + "\n".join(bomb_lines()) + "\n", "utf-8")
        args = ["compile", greeting, "--inputs", str(inputs), "--context", str(context)]
    else:
        inputs.write_text("name: Ryan\n", "utf-8")
        cassette = tmp_path / "cassette.yaml"
        recorded = (REPO_ROOT / "cassettes" / "greeting-success.yaml").read_text("utf-8")
        cassette.write_text(recorded + "\n".join(bomb_lines()) + "\n", "utf-8")
        args = ["execute", greeting, "--inputs", str(inputs), "--context", str(context),
                "--runtime", "langfuse", "--replay", str(cassette)]  # fmt: skip
    done, took = templiqx(*args)
    assert_located_refusal(done, took)


def test_reuse_within_the_budget_still_loads(tmp_path: Path) -> None:
    reused = 10  # ten copies of 1 MB: 10 MB of text, under the budget
    chunk = "y" * 1_000_000
    text = f'a: &s "{chunk}"\nb: [' + ", ".join(["*s"] * reused) + "]\n"
    assert reused * len(chunk) < MAX_ALIAS_EXPANSION_BYTES
    (tmp_path / "ok.yaml").write_text(text, encoding="utf-8")
    data = load_document(tmp_path / "ok.yaml")
    assert len(data["b"]) == reused
