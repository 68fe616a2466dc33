"""The console script in a real process: each failure ends as docs/cli.md says (the
envelope and exit 2, or one stderr line and exit 1), whichever flag or file it comes from."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

GREETING = REPO_ROOT / "examples" / "greeting.yaml"


def templiqx(*args: str | Path, **env: str) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("templiqx")
    host = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    return subprocess.run(
        [str(script), *map(str, args)],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**host, **env},
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


@pytest.mark.parametrize("suffix", [".jsonl", ".yaml"])
def test_cases_file_may_start_with_a_utf8_bom_as_a_contract_may(
    tmp_path: Path, suffix: str
) -> None:
    case = '{"id": "ada", "inputs": {"name": "Ada"}, "context": {"organization": "Blinqx"}, '
    case += '"fake_output": {"greeting": "Hello Ada"}}'
    cases = tmp_path / f"cases{suffix}"
    cases.write_text("\ufeff" + (case if suffix == ".jsonl" else f"[{case}]") + "\n")
    contract = tmp_path / "greeting.yaml"
    contract.write_text("\ufeff" + GREETING.read_text())
    assert templiqx("check", contract).returncode == 0
    ran = templiqx("eval", contract, "--runtime", "scripted", "--cases", cases, "--no-progress")
    assert ran.returncode == 0, ran.stderr
    assert "1/1 passed" in ran.stdout


@pytest.mark.parametrize(
    "fixture", ["greeting: 2020-01-01", "greeting: !!binary aGk=", "1: Hello"], ids=str
)
def test_fixture_output_that_is_not_json_is_a_typed_input_failure(
    tmp_path: Path, fixture: str
) -> None:
    """As ``--inputs`` holding a YAML value JSON has not: the input file failed (exit 1)."""
    output = tmp_path / "output.yaml"
    output.write_text(fixture + "\n")
    args: list[str | Path] = ["--eval", "ryan", "--fixture-output", output]
    ran = templiqx("execute", GREETING, *args)
    assert (ran.returncode, ran.stdout) == (1, ""), ran.stdout
    assert ran.stderr.startswith("templiqx: --fixture-output: not a JSON value"), ran.stderr
    assert ran.stderr.count("\n") == 1


_EXITING = """
import sys

def bye(argv):
    sys.exit(int(argv[0]) if argv[0].isdigit() else None if argv[0] == "none" else argv[0])
"""


@pytest.mark.parametrize(
    ("argument", "code", "stderr"),
    [("none", 0, ""), ("3", 3, ""), ("cannot say bye", 1, "cannot say bye\n")],
)
def test_a_command_leaving_by_sys_exit_exits_as_python_would(
    tmp_path: Path, argument: str, code: int, stderr: str
) -> None:
    """``sys.exit()`` is success and ``sys.exit("why")`` a failure saying why, as for any script."""
    (tmp_path / "tqx_bye.py").write_text(_EXITING)
    info = tmp_path / "tqx_bye-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tqx-bye\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[templiqx.commands]\nbye = tqx_bye:bye\n")
    ran = templiqx("bye", argument, PYTHONPATH=str(tmp_path))
    assert (ran.returncode, ran.stderr) == (code, stderr)


@pytest.mark.parametrize("sink", ["closed pipe", "full disk"])
def test_output_that_cannot_be_written_is_one_line_not_an_internal_error(sink: str) -> None:
    """``templiqx ... | head -1``, or a full disk: the command failed (exit 1), said once."""
    read, write = os.pipe()
    if sink == "full disk":
        if not Path("/dev/full").exists():
            pytest.skip("no /dev/full")
        os.close(write)
        write = os.open("/dev/full", os.O_WRONLY)
    os.close(read)  # every write to the pipe now fails, as after `head` has read its line
    script = Path(sys.executable).with_name("templiqx")
    try:
        ran = subprocess.run(
            [str(script), "compile", str(GREETING), "--eval", "ryan"],
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            check=False,
        )
    finally:
        os.close(write)
    assert ran.returncode == 1
    assert ran.stderr.startswith("templiqx: cannot write the output ("), ran.stderr
    assert ran.stderr.count("\n") == 1, ran.stderr


def test_an_unhashable_yaml_key_is_a_located_parse_failure_not_an_internal_error(
    tmp_path: Path,
) -> None:
    contract = tmp_path / "greeting.yaml"
    contract.write_text(GREETING.read_text() + "? [1, 2]\n: 3\n")
    checked = templiqx("check", contract, "--json")
    assert checked.returncode == 2, checked.stderr
    assert "TQX_PARSE_YAML" in checked.stdout
    assert "unhashable key" in checked.stdout
    inputs = tmp_path / "inputs.yaml"
    inputs.write_text("? [1, 2]\n: 3\n")
    compiled = templiqx("compile", GREETING, "--inputs", inputs)
    assert compiled.returncode == 1
    assert "internal error" not in compiled.stderr
    assert "unhashable key" in compiled.stderr


def test_a_json_document_may_start_with_a_utf8_bom_as_a_contract_may(tmp_path: Path) -> None:
    document = tmp_path / "doc.json"
    document.write_text('\ufeff{"b": 1, "a": 2}')
    with_bom = templiqx("fingerprint", document, "--json")
    document.write_text('{"b": 1, "a": 2}')
    assert with_bom.returncode == 0, with_bom.stderr
    assert with_bom.stdout == templiqx("fingerprint", document, "--json").stdout
