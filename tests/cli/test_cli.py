"""The ``templiqx`` command as a new user meets it: real subprocesses, real files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from templiqx_core import parse_stream_event
from tests.cli.conftest import Run
from tests.conftest import REFERENCE

GREETING = [
    "examples/greeting.yaml",
    "--inputs",
    "examples/greeting.inputs.json",
    "--context",
    "examples/greeting.context.json",
]
REPLAY = ["--runtime", "langfuse", "--replay", "cassettes/greeting-success.yaml"]
BLI61 = str(REFERENCE / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml")
BLI61_OUTPUT_FP = "66d6c3fbb03611b4b22deabbe9ef669e5ad69f59c1e90be4dee92d9c3a5188de"


def test_main_job_streams_ndjson_then_the_envelope(run_cli: Run) -> None:
    result = run_cli("execute", *GREETING, *REPLAY, "--stream")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    events = [parse_stream_event(line) for line in lines[:-1]]
    envelope = json.loads(lines[-1])
    assert [e.kind for e in events] == ["Complete"]
    assert envelope["ok"] is True
    assert envelope["stream_events"] == [json.loads(lines[0])]
    assert envelope["result"]["output"] == {"greeting": "Hello Ryan"}
    assert envelope["result"]["adapter"]["id"] == "templiqx-langfuse"


def test_stream_and_plain_runs_agree(run_cli: Run) -> None:
    streamed = json.loads(
        run_cli("execute", *GREETING, *REPLAY, "--stream").stdout.splitlines()[-1]
    )
    plain = json.loads(run_cli("execute", *GREETING, *REPLAY).stdout)
    assert streamed["fingerprints"] == plain["fingerprints"]
    assert "stream_events" not in plain


def test_scripted_runtime_with_fixture_output_and_eval(run_cli: Run, reference_dir: Path) -> None:
    result = run_cli(
        "execute",
        BLI61,
        "--eval",
        "synthetic-fixed-term",
        "--fixture-output",
        str(reference_dir / "crm3" / "evals" / "bli-61-output.json"),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["fingerprints"]["output"] == BLI61_OUTPUT_FP


def test_scripted_scenario_failure_exits_1_with_one_line(run_cli: Run, reference_dir: Path) -> None:
    manifest = reference_dir / "crm3" / "scenarios" / "ambiguous-date" / "manifest.json"
    result = run_cli(
        "execute",
        BLI61,
        "--request",
        str(reference_dir / "crm3" / "evals" / "bli-61-request.json"),
        "--scenario",
        str(manifest),
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["diagnostics"][0]["code"] == "TQX_RUNTIME_INVALID_RESPONSE"
    assert result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr


def test_compile_and_fingerprint(run_cli: Run, reference_dir: Path) -> None:
    compiled = run_cli("compile", *GREETING)
    assert compiled.returncode == 0, compiled.stderr
    envelope = json.loads(compiled.stdout)
    assert envelope["result"]["messages"][1]["content"] == "Hello Ryan for Blinqx"
    fp = run_cli("fingerprint", str(reference_dir / "crm3" / "evals" / "bli-61-output.json"))
    assert fp.stdout.strip() == BLI61_OUTPUT_FP


def test_eval_reports_each_fixture(run_cli: Run) -> None:
    result = run_cli("eval", BLI61)
    assert result.returncode == 0
    assert result.stdout.startswith(f"pass synthetic-fixed-term output={BLI61_OUTPUT_FP}")
    assert "1 passed, 0 failed" in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["execute", "missing.yaml"], 2, "no such contract file"),
        (
            ["execute", *GREETING[:1], "--inputs", "nope.json"],
            2,
            "--inputs: nope.json: no such file",
        ),
        (["execute", *GREETING, "--runtime", "warp-drive"], 2, "unknown runtime 'warp-drive'"),
        (
            ["execute", *GREETING, "--runtime", "langfuse", "--replay", "nope.yaml"],
            2,
            "--replay: nope.yaml: no such file",
        ),
        (["execute", *GREETING, "--capability", "vision"], 1, "TQX_CAPABILITY_UNSUPPORTED"),
        (["bogus-command"], 2, "invalid choice"),
        (["execute", *GREETING, "--runtime", "langfuse"], 2, "TEMPLIQX_MODEL_API_KEY"),
    ],
)
def test_errors_are_one_clear_line(run_cli: Run, args: list[str], code: int, message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_bad_yaml_contract(run_cli: Run, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("api_version: templiqx/v1alpha1\nid: [oops\n")
    result = run_cli("compile", str(bad))
    assert result.returncode == 1
    assert "TQX_PARSE_YAML" in result.stderr
    assert f"{bad}:3:1" in result.stderr or f"{bad}:2:" in result.stderr


def test_runtime_lacking_a_capability_is_refused(run_cli: Run, tmp_path: Path) -> None:
    contract = tmp_path / "vision.yaml"
    text = (
        Path("examples/greeting.yaml").read_text()
        if Path("examples/greeting.yaml").exists()
        else ""
    )
    contract.write_text(
        text.replace(
            "capabilities:\n  - structured_output",
            "capabilities:\n  - structured_output\n  - vision",
        )
    )
    result = run_cli(
        "execute",
        str(contract),
        "--inputs",
        "examples/greeting.inputs.json",
        "--context",
        "examples/greeting.context.json",
        *REPLAY,
        "--capability",
        "structured_output",
        "--capability",
        "vision",
    )
    assert result.returncode == 1
    assert (
        json.loads(result.stdout)["diagnostics"][0]["code"] == "TQX_RUNTIME_CAPABILITY_UNSUPPORTED"
    )


def test_no_secret_reaches_the_terminal(run_cli: Run) -> None:
    secret = "sk-cli-SECRET-42424242"
    env = {
        "TEMPLIQX_MODEL_API_KEY": secret,
        "TEMPLIQX_MODEL": "m",
        "TEMPLIQX_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
        "TEMPLIQX_MODEL_TIMEOUT_S": "2",
        "LANGFUSE_PUBLIC_KEY": "pk-lf-cli-secret",
        "LANGFUSE_SECRET_KEY": "sk-lf-cli-secret",
        "LANGFUSE_BASE_URL": "http://127.0.0.1:9",
    }
    result = run_cli("execute", *GREETING, "--runtime", "langfuse", "--stream", env=env)
    assert result.returncode == 1
    assert "TQX_RUNTIME_UNAVAILABLE" in result.stderr
    for value in (secret, "pk-lf-cli-secret", "sk-lf-cli-secret"):
        assert value not in result.stdout + result.stderr


def test_help_lists_the_commands(run_cli: Run) -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("compile", "execute", "eval", "fingerprint"):
        assert command in result.stdout
    assert "--replay" in run_cli("execute", "--help").stdout
