"""The start-up budget, guarded by what a command imports (timing is ``bench/cli_startup.py``'s).

Budget: every command that executes no model within 300 ms, the README's main job
(``execute … --runtime langfuse --replay … --stream``) within 600 ms. The core is imported
whole (≈ 0.2 s with pydantic); what would break the budget is a runtime, an HTTP client
or tracing loaded where nothing runs. So the non-executing commands load none of them,
and the main job, which traces nothing (without keys, and with them: a replay is
offline), loads neither langfuse nor OpenTelemetry (≈ 0.2 s); the same job live, against
a loopback model, with keys, imports them and its generation reaches Langfuse. Checked
in a real subprocess once the command has run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO_ROOT
from tests.loopback import chat_completion, json_reply, serve
from tests.otlp_receiver import otlp_receiver

MAIN_JOB = [
    "execute",
    "examples/greeting.yaml",
    "--inputs",
    "examples/greeting.inputs.json",
    "--context",
    "examples/greeting.context.json",
    "--runtime",
    "langfuse",
    "--replay",
    "cassettes/greeting-success.yaml",
    "--stream",
]
LIVE_JOB = [arg for arg in MAIN_JOB if arg not in ("--replay", "cassettes/greeting-success.yaml")]
TRACING_MODULES = ("langfuse", "opentelemetry", "templiqx_langfuse._export")
# What a command that runs no model must not load: runtimes, HTTP, tracing, the MCP
# extra, the test tooling a replay borrows from.
RUNTIME_MODULES = ("templiqx_langfuse", "httpx", "vcr", "mcp", "pytest", *TRACING_MODULES)
NON_EXECUTING = [  # (arguments, whether the envelope is ok)
    (["--help"], True),
    (["runtimes"], True),
    (["fingerprint", "examples/greeting.inputs.json"], True),
    (["check", "examples/greeting.yaml"], True),
    (["compile", *MAIN_JOB[1:6]], True),
    (["compile", "examples/greeting.yaml"], False),  # values missing
    (["eval", "examples/greeting.yaml"], True),  # the fixtures' self-check: no model
]

# Runs the CLI in-process (the same ``main`` the console script calls) so the modules it
# left loaded can be listed once it has returned: the runtime is closed by then.
_PROBE = (
    "import contextlib, io, json, sys\n"
    "from templiqx_core._cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
    "    try:\n"
    "        rc = main(sys.argv[1:])\n"
    "    except SystemExit as exit:  # --help\n"
    "        rc = exit.code\n"
    "loaded = sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))\n"
    "print(json.dumps({'rc': rc, 'stdout': out.getvalue(), 'modules': loaded}))\n"
)


def _run(env: dict[str, str], job: list[str] = MAIN_JOB, *, ok: bool = True) -> dict[str, object]:
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LANGFUSE_", "TEMPLIQX_", "OPENAI_"))
    }
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, *job],
        cwd=REPO_ROOT,
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report: dict[str, object] = json.loads(result.stdout.splitlines()[-1])
    assert report["rc"] == (0 if ok else 2), result.stderr[-3000:]
    if job[0] != "--help":  # the envelope: one line after the events, or pretty JSON
        text = str(report["stdout"])
        envelope = json.loads(text.splitlines()[-1] if "--stream" in job else text)
        assert envelope["ok"] is ok
    report["stderr"] = result.stderr
    return report


def _loaded(report: dict[str, object], name: str) -> bool:
    modules = report["modules"]
    assert isinstance(modules, list)
    return name in modules


def test_main_job_without_keys_never_imports_langfuse_or_opentelemetry() -> None:
    report = _run({})
    assert [m for m in TRACING_MODULES if _loaded(report, m)] == []
    assert _loaded(report, "templiqx_langfuse._runtime")  # it did build the runtime


def test_main_job_with_keys_stays_offline_and_imports_nothing_for_tracing() -> None:
    with otlp_receiver() as receiver:
        report = _run(
            {
                "LANGFUSE_PUBLIC_KEY": "pk-lf-startup",
                "LANGFUSE_SECRET_KEY": "sk-lf-startup",
                "LANGFUSE_BASE_URL": receiver.base_url,
            }
        )
        assert [m for m in TRACING_MODULES if _loaded(report, m)] == []
        assert receiver.requests == []
    assert "Langfuse tracing is off" in str(report["stderr"])


def test_live_job_with_keys_imports_them_and_exports_its_generation() -> None:
    reply = json_reply(chat_completion({"greeting": "Hello Ryan"}))
    with serve(lambda _request: reply) as model, otlp_receiver() as receiver:
        report = _run(
            {
                "TEMPLIQX_MODEL": "loopback-model",
                "TEMPLIQX_MODEL_API_KEY": "sk-startup-model",
                "TEMPLIQX_MODEL_BASE_URL": model.base_url,
                "LANGFUSE_PUBLIC_KEY": "pk-lf-startup",
                "LANGFUSE_SECRET_KEY": "sk-lf-startup",
                "LANGFUSE_BASE_URL": receiver.base_url,
            },
            LIVE_JOB,
        )
        assert [m for m in TRACING_MODULES if _loaded(report, m)] == list(TRACING_MODULES)
        # Closing the runtime flushed the generation before the process exited.
        assert receiver.span_names() == ["greeting"]


@pytest.mark.parametrize(
    ("command", "ok"), NON_EXECUTING, ids=[" ".join(c) for c, _ in NON_EXECUTING]
)
def test_commands_that_run_no_model_load_no_runtime(command: list[str], ok: bool) -> None:
    report = _run({}, command, ok=ok)
    assert [m for m in RUNTIME_MODULES if _loaded(report, m)] == []


def test_help_loads_no_model_class_and_no_parser() -> None:
    """``--help`` is argparse alone: the package namespace loads its names on first use."""
    report = _run({}, ["--help"])
    assert [
        m for m in ("pydantic", "yaml", "orjson", "templiqx_core._contracts") if _loaded(report, m)
    ] == []


def test_fingerprint_and_runtimes_read_no_contract() -> None:
    for command in (["fingerprint", "examples/greeting.inputs.json"], ["runtimes"]):
        report = _run({}, command)
        assert not _loaded(report, "templiqx_core._compiler"), command
