"""The README's main job imports only what it uses (start-up budget, issue 14).

``execute … --runtime langfuse --replay …`` traces nothing (without keys, and with them:
a replay is offline), so it must not pay for importing langfuse and OpenTelemetry (~0.2 s
of a ~0.4 s run). Checked by what is imported when the job has run, in a real
subprocess, not by timing; the same job live, against a loopback model, with keys,
imports them and its generation reaches Langfuse.
"""

from __future__ import annotations

import contextlib
import gc
import io
import json
import os
import subprocess
import sys

from templiqx_core._cli import main
from templiqx_langfuse.testing.otlp import otlp_receiver
from templiqx_langfuse.testing.server import chat_completion, json_reply, serve
from tests.conftest import REPO_ROOT

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
TRACING_MODULES = ("langfuse", "opentelemetry", "templiqx_langfuse._recording")

# Runs the CLI in-process (the same ``main`` the console script calls) so the modules it
# left loaded can be listed once it has returned: the runtime is closed by then.
_PROBE = (
    "import contextlib, io, json, sys\n"
    "from templiqx_core._cli import main\n"
    "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
    "    rc = main(sys.argv[1:])\n"
    "loaded = sorted({m.split('.')[0] for m in sys.modules} | set(sys.modules))\n"
    "print(json.dumps({'rc': rc, 'stdout': out.getvalue(), 'modules': loaded}))\n"
)


def _run_main_job(env: dict[str, str], job: list[str] = MAIN_JOB) -> dict[str, object]:
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
    assert report["rc"] == 0, result.stderr[-3000:]
    last = json.loads(str(report["stdout"]).splitlines()[-1])
    assert last["ok"] is True
    report["stderr"] = result.stderr
    return report


def _loaded(report: dict[str, object], name: str) -> bool:
    modules = report["modules"]
    assert isinstance(modules, list)
    return name in modules


def test_main_job_without_keys_never_imports_langfuse_or_opentelemetry() -> None:
    report = _run_main_job({})
    assert [m for m in TRACING_MODULES if _loaded(report, m)] == []
    assert _loaded(report, "templiqx_langfuse._runtime")  # it did build the runtime


def test_main_job_with_keys_stays_offline_and_imports_nothing_for_tracing() -> None:
    with otlp_receiver() as receiver:
        report = _run_main_job(
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
        report = _run_main_job(
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


def test_console_command_spares_the_collector() -> None:
    # The console script's one command runs with rare cyclic-GC passes (still on, so a long
    # eval collects its cycles) and freezes what it built before exit (shutdown then skips
    # scanning it): ~0.1 s of the README's job. The thresholds come back afterwards.
    code = (
        "import contextlib, gc, io, sys\n"
        "from templiqx_core._cli import main\n"
        "sys.argv = ['templiqx', *sys.argv[1:]]\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and collections.append(1))\n"
        "before = gc.get_threshold()\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main()\n"
        "print(rc, len(collections), gc.isenabled(), gc.get_freeze_count() > 0,\n"
        "      gc.get_threshold() == before)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    result = subprocess.run(
        [sys.executable, "-c", code, *MAIN_JOB],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    rc, collections, enabled, frozen, restored = result.stdout.split()
    # A few young-generation passes while the parser is built, before the pause; the
    # same job with the collector running makes well over a hundred.
    assert (rc, enabled, frozen, restored) == ("0", "True", "True", "True")
    assert int(collections) <= 5


def test_main_called_with_arguments_leaves_the_collector_alone() -> None:
    frozen = gc.get_freeze_count()
    with contextlib.redirect_stdout(io.StringIO()):
        assert main(["runtimes"]) == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == frozen


def test_console_command_still_collects_cycles_of_long_work() -> None:
    # A long command (an eval over many cases) must not grow without bound: the collector
    # is only made rarer during the one command, never switched off.
    code = (
        "import gc\n"
        "from templiqx_core import _cli\n"
        "collections = []\n"
        "gc.callbacks.append(lambda phase, info: phase == 'start' and collections.append(1))\n"
        "previous = _cli._pause_gc()\n"
        "for _ in range(300_000):\n"
        "    a = []; a.append(a)\n"
        "print(len(collections), gc.isenabled())\n"
        "_cli._resume_gc(previous)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    collections, enabled = result.stdout.split()
    assert enabled == "True"
    assert int(collections) >= 2
