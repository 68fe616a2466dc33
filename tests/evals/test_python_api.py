"""``run_eval`` / ``arun_eval`` and the pytest helper, offline from a cassette."""

from __future__ import annotations

import asyncio
import io
import json
import time
from pathlib import Path

import pytest

from templiqx_core import ScriptedRuntime, ScriptedSuccess
from templiqx_core._eval_cases import EvalCaseSpec
from templiqx_langfuse.evals import arun_eval, assert_eval_passes, judge_evaluator, run_eval
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


def test_a_cancelled_run_leaves_a_resumable_file_with_a_partial_summary(tmp_path: Path) -> None:
    from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
    from templiqx_langfuse.evals import read_results
    from tests.slow_upstream import slow_upstream

    cases = [
        EvalCaseSpec.model_validate(
            {"id": f"c{i}", "inputs": {"name": f"P{i}"}, "context": {"organization": "B"}}
        )
        for i in range(20)
    ]
    results = tmp_path / "results.json"

    async def run(runtime: LangfuseTracedRuntime, resume: Path | None) -> None:
        with results.open("w", encoding="utf-8") as stream:
            await arun_eval(
                GREETING, runtime=runtime, cases=cases, concurrency=2, output=stream,
                resume=() if resume is None else list(read_results(resume)),
            )  # fmt: skip

    async def cut_short(runtime: LangfuseTracedRuntime) -> None:
        task = asyncio.create_task(run(runtime, None))
        for _ in range(500):  # bounded: until two cases are written (header + 2 lines)
            await asyncio.sleep(0.02)
            if results.exists() and results.read_text().count("\n") >= 3:
                break
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with slow_upstream(0.1) as upstream:
        model = ModelConfig(base_url=upstream.base_url, model="m", api_key="sk-x")
        with LangfuseTracedRuntime(model, LangfuseConfig(tracing=False)) as runtime:
            asyncio.run(cut_short(runtime))
            document = json.loads(results.read_text())  # closed: one valid JSON document
            assert document["summary"]["interrupted"] is True
            finished = document["summary"]["total"]
            assert 2 <= finished < 20
            assert len(document["cases"]) == finished
            for _ in range(100):  # bounded: a cancelled call's request may still be arriving
                calls = upstream.calls
                time.sleep(0.05)
                if upstream.calls == calls and upstream.in_flight == 0:
                    break
            resumed = tmp_path / "first.json"
            results.rename(resumed)
            asyncio.run(run(runtime, resumed))
        assert upstream.calls - calls == 20 - finished
    assert json.loads(results.read_text())["summary"]["total"] == 20


@pytest.mark.parametrize("io", ["sync", "async"])
def test_repair_runs_each_case_through_the_repairing_runtime(io: str) -> None:
    model = ScriptedRuntime(
        [ScriptedSuccess(text="Hello Ryan!"), ScriptedSuccess(output={"greeting": "Hello Ryan"})]
    )
    if io == "async":
        report = asyncio.run(arun_eval(GREETING, runtime=model, repair=2))
    else:
        report = run_eval(GREETING, runtime=model, repair=2)
    (case,) = report.cases
    assert (case.passed, case.attempts, case.output) == (True, 2, {"greeting": "Hello Ryan"})
    assert case.to_json()["attempts"] == 2
    again = ScriptedRuntime([ScriptedSuccess(text="Hello Ryan!")])
    (failed,) = run_eval(GREETING, runtime=again, repair=1).cases
    assert (failed.errored, failed.attempts) == (True, 1)
    assert run_eval(GREETING, runtime=again).cases[0].attempts is None


def test_a_judge_takes_the_evaluator_arguments_only() -> None:
    runtime = ScriptedRuntime([ScriptedSuccess(output={"score": True})])
    judge = judge_evaluator(REPO_ROOT / "tests" / "evals" / "judge.yaml", runtime)
    with pytest.raises(TypeError):
        judge(input={}, output={}, expected_output=None, metadata={}, extra=1)
