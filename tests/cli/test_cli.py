"""The ``templiqx`` command as a new user meets it: real subprocesses, real files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.cli.conftest import Run
from tests.conftest import REFERENCE, REPO_ROOT, parse_stream_event

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


def test_compile_and_fingerprint(run_cli: Run, reference_dir: Path) -> None:
    compiled = run_cli("compile", *GREETING)
    assert compiled.returncode == 0, compiled.stderr
    envelope = json.loads(compiled.stdout)
    assert envelope["operation"] == "compile_contract"
    assert envelope["result"]["messages"][1]["content"] == "Hello Ryan for Blinqx"
    assert list(envelope["fingerprints"]) == ["compiled_interaction"]
    fp = run_cli("fingerprint", str(reference_dir / "crm3" / "evals" / "bli-61-output.json"))
    assert fp.returncode == 0
    assert json.loads(fp.stdout) == {
        "api_version": "templiqx/v1alpha1",
        "operation": "fingerprint",
        "ok": True,
        "result": BLI61_OUTPUT_FP,
        "diagnostics": [],
        "fingerprints": {},
    }


def test_commands_print_the_envelope_a_host_gets(run_cli: Run) -> None:
    # The CLI's stdout is the library's envelope, pretty or compact, byte for byte.
    from templiqx_core import OperationEnvelope

    for args in (["runtimes"], ["runtimes", "--json"], ["--json", "runtimes"]):
        result = run_cli(*args)
        assert result.returncode == 0
        names = json.loads(result.stdout)["result"]
        assert {"scripted", "langfuse"} <= set(names)
        expected = OperationEnvelope[list[str]](operation="runtimes", ok=True, result=names)
        indent = None if "--json" in args else 2
        assert result.stdout == expected.model_dump_json(indent=indent) + "\n"
    # compile, ok and not ok: what ``compile_envelope`` returns for the same request.
    from templiqx_core import RenderRequest, compile_envelope
    from templiqx_core._compiler import read_contract

    contract, _ = read_contract(REPO_ROOT / GREETING[0])
    assert contract is not None
    request = RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"})
    for args, values in (
        (GREETING, request),
        (GREETING[:1], RenderRequest()),
        ([*GREETING, "--json"], request),
        ([*GREETING[:1], "--json"], RenderRequest()),
    ):
        result = run_cli("compile", *args)
        envelope = compile_envelope(contract, values, capabilities=["structured_output"])
        if not envelope.ok:  # the CLI names the contract file in its diagnostics
            marked = [d.model_copy(update={"file": GREETING[0]}) for d in envelope.diagnostics]
            envelope = envelope.model_copy(update={"diagnostics": marked})
        indent = None if "--json" in args else 2
        assert result.stdout == envelope.model_dump_json(indent=indent) + "\n"
        assert result.returncode == (0 if envelope.ok else 2)


def test_eval_prints_the_test_report(run_cli: Run) -> None:
    result = run_cli("eval", BLI61, "--json")
    assert result.returncode == 0, result.stderr
    envelope = json.loads(result.stdout)
    assert envelope["operation"] == "test_package"
    assert envelope["result"] == {
        "package": "crm3",
        "passed": 1,
        "failed": 0,
        "cases": [
            {
                "contract_id": "bli-61-date-term-extraction",
                "fixture_id": "synthetic-fixed-term",
                "passed": True,
                "diagnostics": [],
                "artifact_fingerprint": BLI61_OUTPUT_FP,
            }
        ],
    }


def test_eval_with_a_failing_fixture_exits_2(run_cli: Run, tmp_path: Path) -> None:
    contract = tmp_path / "bli-61.yaml"
    text = Path(BLI61).read_text()
    contract.write_text(text.replace('effective_date: "2026-09-01"', "effective_date: 12"))
    result = run_cli("eval", str(contract), "--json")
    envelope = json.loads(result.stdout)
    assert result.returncode == 2
    assert [d["code"] for d in envelope["diagnostics"]] == ["TQX_TEST_FAILED"]
    assert envelope["result"]["failed"] == 1


def test_execute_without_a_runtime_is_a_usage_error(run_cli: Run) -> None:
    result = run_cli("execute", *GREETING)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "--runtime" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        # A usage error (as clap): 2.
        (["bogus-command"], 2, "invalid choice"),
        (["compile"], 2, "required: contract"),
        # The command itself failed: 1, nothing on stdout.
        (
            ["execute", *GREETING[:1], "--inputs", "nope.json", "--runtime", "scripted"],
            1,
            "--inputs: nope.json: no such file",
        ),
        (["execute", *GREETING, "--runtime", "warp-drive"], 1, "unknown runtime 'warp-drive'"),
        (
            ["execute", *GREETING, "--runtime", "langfuse", "--replay", "nope.yaml"],
            1,
            "cassette nope.yaml does not exist",
        ),
        (["execute", *GREETING, "--runtime", "langfuse"], 1, "TEMPLIQX_MODEL_API_KEY"),
        (["fingerprint", "nope.json"], 1, "no such file"),
        # A not-ok envelope: 2, the envelope on stdout.
        (["compile", "missing.yaml"], 2, "TQX_NOT_FOUND"),
        (
            ["execute", *GREETING, "--runtime", "scripted", "--capability", "vision"],
            2,
            "TQX_CAPABILITY_UNSUPPORTED",
        ),
    ],
)
def test_errors_are_one_clear_line(run_cli: Run, args: list[str], code: int, message: str) -> None:
    result = run_cli(*args)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    if code == 1:
        assert result.stdout == ""


def test_bad_yaml_contract(run_cli: Run, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("api_version: templiqx/v1alpha1\nid: [oops\n")
    result = run_cli("compile", str(bad))
    assert result.returncode == 2
    assert "TQX_PARSE_YAML" in result.stderr
    assert f"{bad}:3:1" in result.stderr or f"{bad}:2:" in result.stderr


def test_runtime_lacking_a_capability_is_refused(run_cli: Run, tmp_path: Path) -> None:
    contract = tmp_path / "vision.yaml"
    document = yaml.safe_load((REPO_ROOT / "examples" / "greeting.yaml").read_text())
    document["capabilities"] = ["structured_output", "vision"]
    contract.write_text(yaml.safe_dump(document))
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
    assert result.returncode == 2
    assert json.loads(result.stdout)["diagnostics"] == [
        {
            "code": "TQX_RUNTIME_CAPABILITY_UNSUPPORTED",
            "severity": "error",
            "message": "runtime lacks 'vision'",
            "json_pointer": "/capabilities",
        }
    ]


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
    assert result.returncode == 2
    assert "TQX_RUNTIME_UNAVAILABLE" in result.stderr
    for value in (secret, "pk-lf-cli-secret", "sk-lf-cli-secret"):
        assert value not in result.stdout + result.stderr


def test_help_lists_the_commands(run_cli: Run) -> None:
    result = run_cli("--help")
    assert result.returncode == 0
    for command in ("compile", "execute", "eval", "fingerprint", "runtimes"):
        assert command in result.stdout
    execute_help = run_cli("execute", "--help").stdout
    assert "--replay" in execute_help
    for text in (result.stdout, execute_help, run_cli("compile", "--help").stdout):
        assert "SPEC" not in text
        assert "§" not in text


def test_replay_does_not_import_pytest() -> None:
    # The README's main job (start-up budget 600 ms): replaying a cassette imports neither
    # pytest nor pytest-recording (≈ 85 ms).
    code = (
        "import contextlib, io, sys\n"
        "from templiqx_core._cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['execute', *sys.argv[1:], '--runtime', 'langfuse',\n"
        "               '--replay', 'cassettes/greeting-success.yaml', '--stream'])\n"
        "print(rc, 'pytest' in sys.modules, 'pytest_recording' in sys.modules)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    result = subprocess.run(
        [sys.executable, "-c", code, *GREETING],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    )
    assert result.stdout.split() == ["0", "False", "False"]


def test_a_missing_runtime_of_this_repository_says_which_distribution_brings_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``openai-stream`` is installed here (the dev extra), so a stand-in name is missing."""
    from templiqx_core import Unsupported, _runtimes
    from templiqx_core._runtimes import RuntimeOptions, load_runtime

    provided = _runtimes._PROVIDED_BY["openai-stream"]
    monkeypatch.setitem(_runtimes._PROVIDED_BY, "stream-stand-in", provided)
    with pytest.raises(Unsupported) as raised:
        load_runtime("stream-stand-in", RuntimeOptions())
    assert "templiqx-streaming-host" in str(raised.value)
    with pytest.raises(Unsupported) as other:
        load_runtime("warp-drive", RuntimeOptions())
    assert "comes with" not in str(other.value)
