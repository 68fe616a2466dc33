"""``run_eval`` / ``arun_eval`` and the pytest helper, offline from a cassette."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest

from templiqx_core._eval_cases import EvalCaseSpec
from templiqx_langfuse.evals import arun_eval, assert_eval_passes, run_eval
from templiqx_langfuse.testing.replay import replaying_runtime
from tests.conftest import REPO_ROOT
from tests.evals.conftest import GREETING

CASSETTE = REPO_ROOT / "cassettes" / "greeting-success.yaml"


def test_run_eval_replays_the_suite_offline_and_reports(tmp_path: Path) -> None:
    with replaying_runtime(CASSETTE) as runtime:
        report = run_eval(GREETING, runtime=runtime)
    assert report.passed
    (case,) = report.cases
    assert case.id == "ryan"
    assert case.output == {"greeting": "Hello Ryan"}
    assert report.summary.to_json()["pass_rate"] == 1.0


def test_arun_eval_streams_results_to_a_file_as_one_json_document() -> None:
    stream = io.StringIO()

    async def main() -> None:
        with replaying_runtime(CASSETTE) as runtime:
            await arun_eval(GREETING, runtime=runtime, output=stream, run_name="nightly")

    asyncio.run(main())
    document = json.loads(stream.getvalue())
    assert document["summary"]["run_name"] == "nightly"
    assert [c["id"] for c in document["cases"]] == ["ryan"]


def test_assert_eval_passes_names_each_failing_case_and_why() -> None:
    wrong = EvalCaseSpec.model_validate(
        {
            "id": "ryan",
            "inputs": {"name": "Ryan"},
            "context": {"organization": "Blinqx"},
            "assert": [{"pointer": "/greeting", "equals": "Goodbye"}],
        }
    )
    with replaying_runtime(CASSETTE) as runtime, pytest.raises(AssertionError) as failed:
        assert_eval_passes(GREETING, runtime=runtime, cases=[wrong])
    message = str(failed.value)
    assert "eval greeting: 0/1 passed" in message
    assert 'ryan#0: /greeting equals: /greeting: expected equals "Goodbye", got "Hello Ryan"' in (
        message
    )


def test_assert_eval_passes_returns_the_report_when_the_gate_passes() -> None:
    with replaying_runtime(CASSETTE) as runtime:
        report = assert_eval_passes(GREETING, runtime=runtime, min_pass_rate=1.0)
    assert report.summary.passed == 1


def test_progress_is_one_redrawn_line_on_the_stream_it_is_given() -> None:
    stream = io.StringIO()
    with replaying_runtime(CASSETTE) as runtime:
        run_eval(GREETING, runtime=runtime, progress=stream)
    drawn = stream.getvalue()
    assert drawn.startswith("\reval greeting [")
    assert "] 1/1 ✗ 0 errored 0 " in drawn
    assert drawn.endswith("\n")


def test_the_command_draws_no_progress_when_stderr_is_not_a_terminal(tmp_path: Path) -> None:
    import contextlib

    from templiqx_core._cli import main
    from tests.evals.conftest import Ran

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["eval", str(GREETING), "--runtime", "langfuse", "--replay", str(CASSETTE)])
    assert Ran(code, out.getvalue(), err.getvalue()).code == 0
    assert "\r" not in err.getvalue()
