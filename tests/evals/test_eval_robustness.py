"""Odd evaluator values, a crashing evaluator, secrets in answers, a running loop, the
working directory's evaluators, and ``run_eval`` landing in Langfuse by default."""

from __future__ import annotations

import asyncio
import io
import json
import math
import os
import subprocess
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from templiqx_core import InvalidData, Unsupported
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig
from templiqx_langfuse.evals import arun_eval, run_eval, table, write_junit
from templiqx_langfuse.evals._report import read_results, read_summary
from templiqx_langfuse.testing.replay import replaying_runtime
from tests.conftest import REPO_ROOT
from tests.evals.conftest import GREETING, Cli, GreetingModel, write_cases
from tests.evals.fake_langfuse import PUBLIC_KEY, SECRET_KEY, FakeLangfuse

CASSETTE = REPO_ROOT / "cassettes" / "greeting-success.yaml"
ODD = {
    "huge_int": (2**70, float(2**70)),
    "nan": (math.nan, "not a finite number"),
    "inf": (math.inf, "not a finite number"),
    "past_float": (10**400, "not a finite number"),
    "nested": ({"a": [1]}, "a dict: not a number, string or boolean"),
    "none": (None, "a NoneType: not a number, string or boolean"),
    "text": ("good", "good"),
}


def _odd(name: str, value: Any) -> Any:
    def evaluate(**_: Any) -> dict[str, Any]:
        return {"name": name, "value": value}

    evaluate.__name__ = name
    return evaluate


def test_every_evaluator_value_is_a_score_or_a_per_case_error_with_its_reason() -> None:
    stream = io.StringIO()
    evaluators = [_odd(name, value) for name, (value, _) in ODD.items()]
    with replaying_runtime(CASSETTE) as runtime:
        report = run_eval(GREETING, runtime=runtime, evaluators=evaluators, output=stream)
    document = json.loads(stream.getvalue())  # valid JSON: no NaN, no 70-bit integer
    (case,) = document["cases"]
    assert {s["name"]: s["value"] for s in case["scores"]} == {
        "huge_int": float(2**70),
        "text": "good",
    }
    failed = {a["name"]: a["detail"] for a in case["assertions"] if not a["passed"]}
    for name, (_, reason) in ODD.items():
        if name not in ("huge_int", "text"):
            assert reason in failed[name], name
    assert document["summary"]["failed"] == 1
    assert report.summary.score_means() == {"huge_int": float(2**70)}


def test_the_command_scores_2_to_the_70_and_writes_a_valid_file(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    out = tmp_path / "results.json"
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--output", out,
        "--evaluator", "tests.evals.evaluators:huge",
    )  # fmt: skip
    assert ran.code == 0, ran.err  # was: exit 1, internal error (ExceptionGroup)
    document = json.loads(out.read_text())
    assert document["summary"]["total"] == len(document["cases"]) == 1
    assert document["cases"][0]["scores"] == [{"name": "huge", "value": 2.0**70, "comment": None}]


def _model() -> ModelConfig:
    return ModelConfig(base_url=os.environ["TEMPLIQX_MODEL_BASE_URL"], model="m", api_key="sk-x")


@pytest.mark.usefixtures("greeting_model")
def test_ctrl_c_in_an_evaluator_leaves_a_valid_file_whose_summary_agrees_with_its_cases(
    tmp_path: Path,
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada", "Grace", "Linus"])
    results = tmp_path / "results.json"
    ran = subprocess.run(
        [
            sys.executable, "-c", "import sys; from templiqx_core._cli import main; "
            "sys.exit(main(sys.argv[1:]))", "eval", str(GREETING), "--runtime", "langfuse",
            "--cases", str(cases), "--concurrency", "1", "--output", str(results),
            "--evaluator", "tests.evals.evaluators:interrupting",
        ],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert ran.returncode == 130, ran.stderr
    assert f"--resume {results} runs the rest" in ran.stderr
    document = json.loads(results.read_text())
    summary = document["summary"]
    assert summary["interrupted"] is True
    assert summary["total"] == len(document["cases"]) == 1
    assert summary["passed"] == sum(c["passed"] for c in document["cases"])


def test_run_eval_inside_a_running_loop_says_to_await_arun_eval() -> None:
    async def notebook_cell() -> None:
        with replaying_runtime(CASSETTE) as runtime:
            run_eval(GREETING, runtime=runtime)

    with pytest.raises(Unsupported, match=r"await arun_eval\(\.\.\.\)"):
        asyncio.run(notebook_cell())


def test_an_evaluator_module_of_the_working_directory_imports(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "team_evaluators.py").write_text(
        "def summary_len(*, output, **_):\n"
        "    return {'name': 'summary_len', 'value': len(output['greeting'])}\n"
    )
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", os.getcwd())])
    monkeypatch.chdir(tmp_path)
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--format", "json",
        "--evaluator", "team_evaluators:summary_len",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    (case,) = json.loads(ran.out)["cases"]
    assert case["scores"] == [{"name": "summary_len", "value": 10.0, "comment": None}]
    assert str(tmp_path) not in sys.path  # imported, and the path left as it was


SECRET = "skLoopbackKEY4242"


def test_a_model_answer_echoing_the_api_key_is_redacted_in_every_result_format(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TEMPLIQX_MODEL_API_KEY", SECRET)
    cases = write_cases(tmp_path / "cases.jsonl", [SECRET])
    out = tmp_path / "results.json"
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--output", out)
    assert ran.code == 0, ran.err  # checked on the answer itself; recorded redacted
    junit = cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "junit")
    written = out.read_text()
    assert "Hello [REDACTED]" in written
    for text in (written, ran.out, ran.err, junit.out, junit.err):
        assert SECRET not in text


def test_a_recording_replay_runtime_s_key_is_redacted_from_eval_results(
    greeting_model: GreetingModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The runtime a cassette wraps is found through the replaying runtime, as any wrapper's."""
    monkeypatch.setenv("TEMPLIQX_MODEL_API_KEY", SECRET)
    cases = write_cases(tmp_path / "cases.jsonl", [SECRET])
    stream = io.StringIO()
    with replaying_runtime(tmp_path / "recorded.yaml", record_mode="once") as runtime:
        run_eval(GREETING, runtime=runtime, cases=cases, output=stream)
    assert "Hello [REDACTED]" in stream.getvalue()
    assert SECRET not in stream.getvalue()


@pytest.fixture
def langfuse(greeting_model: GreetingModel) -> Iterator[FakeLangfuse]:
    fake = FakeLangfuse().start()
    yield fake
    fake.stop()


def test_run_eval_lands_as_an_experiment_whenever_tracing_is_on(langfuse: FakeLangfuse) -> None:
    model = _model()
    config = LangfuseConfig(
        public_key=PUBLIC_KEY, secret_key=SECRET_KEY, base_url=langfuse.base_url
    )
    with LangfuseTracedRuntime(model, config) as runtime:
        report = run_eval(GREETING, runtime=runtime)
        assert report.passed
        assert list(langfuse.datasets) == ["greeting"]  # the contract id
        assert len(langfuse.items) == 1
        assert report.summary.run_name.startswith("greeting v")  # the CLI's default
        run_eval(GREETING, runtime=runtime)  # the same item again, not a second one
        assert len(langfuse.items) == 1

        def eval_scores() -> int:  # the exporter's own scores arrive in the background
            return sum(score.name != "output_schema_valid" for score in langfuse.scores)

        landed = eval_scores()
        run_eval(GREETING, runtime=runtime, experiment=False)
        assert eval_scores() == landed
    assert langfuse.errors == []
    assert {"passed", "pass_rate", "check 0: schema_valid"} <= {s.name for s in langfuse.scores}


def test_arun_eval_uses_a_host_s_langfuse_client_without_shutting_it_down(
    langfuse: FakeLangfuse,
) -> None:
    from langfuse.api import AsyncLangfuseAPI

    class HostClient:  # what the adapter uses of a host's ``Langfuse``: its async_api
        def __init__(self) -> None:
            self.async_api = AsyncLangfuseAPI(
                base_url=langfuse.base_url, username=PUBLIC_KEY, password=SECRET_KEY
            )

        def shutdown(self) -> None:
            raise AssertionError("the host's client was shut down")

    model = _model()
    config = LangfuseConfig(
        public_key=PUBLIC_KEY, secret_key=SECRET_KEY, base_url=langfuse.base_url
    )
    with LangfuseTracedRuntime(model, config) as runtime:
        report = asyncio.run(arun_eval(GREETING, runtime=runtime, langfuse=HostClient()))
    assert report.passed
    assert list(langfuse.datasets) == ["greeting"]
    assert "POST /api/public/scores" in langfuse.calls
    assert table(report.summary, report.cases)
    write_junit(report.summary, report.cases, junit := io.StringIO())
    assert junit.getvalue()


def test_merging_another_contract_s_results_is_refused(cli: Cli, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"format": "templiqx.eval/v1", "contract_id": "triage", "cases": [\n]}\n')
    ran = cli("eval", GREETING, "--merge", other)
    assert ran.code == 1
    assert "holds results of 'triage'" in ran.err


def test_a_dataset_naming_one_case_id_twice_is_refused(
    cli: Cli, langfuse: FakeLangfuse, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key, value in (("PUBLIC_KEY", PUBLIC_KEY), ("SECRET_KEY", SECRET_KEY)):
        monkeypatch.setenv(f"LANGFUSE_{key}", value)
    monkeypatch.setenv("LANGFUSE_BASE_URL", langfuse.base_url)
    for item in ("a", "b"):
        langfuse.seed("dup", item, input={"name": "Ryan"}, metadata={"case_id": "same"})
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", "langfuse:dup")
    assert ran.code == 1
    assert "case id 'same' appears twice" in ran.err


@pytest.mark.usefixtures("greeting_model")
def test_a_huge_concurrency_starts_no_more_workers_than_cases() -> None:
    with LangfuseTracedRuntime(_model(), LangfuseConfig(tracing=False)) as runtime:
        report = run_eval(GREETING, runtime=runtime, concurrency=10**9)
    assert report.passed


@pytest.mark.parametrize(
    "garbled",
    [
        {"passed": False, "errored": True, "error": {}},  # an error without code or detail
        {"passed": False, "errored": True, "error": {"code": "TQX_X"}},
        {"passed": False, "errored": False, "assertions": [{}]},  # a check without its keys
        {"passed": True, "errored": False, "scores": [{"value": 1}]},  # a score without a name
        {"passed": True, "errored": False, "latency_ms": "NaN"},
    ],
)
@pytest.mark.usefixtures("greeting_model")
def test_a_resumed_case_the_reports_cannot_read_is_run_again(
    cli: Cli, tmp_path: Path, garbled: dict[str, object]
) -> None:
    head = '{"format": "templiqx.eval/v1", "contract_id": "greeting", "contract_version": "0.1.0"'
    results = tmp_path / "results.json"
    record = json.dumps({"id": "ryan", **garbled})
    results.write_text(f'{head}, "cases": [\n{record}\n', encoding="utf-8")
    for fmt in ("table", "junit"):
        ran = cli("eval", GREETING, "--runtime", "langfuse", "--resume", results, "--format", fmt)
        assert ran.code == 0, ran.err
        assert "internal error" not in ran.err
    assert "nan" not in ran.out


def results_file(path: Path, cases: int) -> Path:
    """A complete results file of ``cases`` passed cases of the greeting contract."""
    head = '{"format": "templiqx.eval/v1", "contract_id": "greeting", "contract_version": "0.1.0"'
    record = {"id": "", "repeat": 0, "passed": True, "errored": False, "latency_ms": 12.5}
    summary = {"contract_id": "greeting", "contract_version": "0.1.0", "run_name": "big"}
    with path.open("w", encoding="utf-8") as out:
        out.write(f'{head}, "cases": [\n')
        for n in range(cases):
            out.write(("," if n else "") + json.dumps({**record, "id": f"case-{n}"}) + "\n")
        out.write(f'], "summary": {json.dumps({**summary, "total": cases})}}}\n')
    return path


def peak_bytes(work: Any) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_results_file_s_summary_costs_a_read_of_its_tail(tmp_path: Path) -> None:
    big = results_file(tmp_path / "big.json", 200_000)  # ~18 MB
    found: list[Any] = []
    peak = peak_bytes(lambda: found.append(read_summary(big)))
    assert found[0]["run_name"] == "big"
    assert peak < 4 * 2**20, f"{peak / 2**20:.1f} MiB for a summary"


_RUN = 4 * 2**20  # what a run allocates whatever the file (its contract, its runtime)


def test_resume_reads_a_large_results_file_as_the_run_goes(cli: Cli, tmp_path: Path) -> None:
    """The resumed cases were a list before the run (1.4 GB for a 290 MB file, nine times
    this file here); now only their keys are held. --output onto the --resume file reads a
    copy."""
    results = results_file(tmp_path / "results.json", 20_000)  # ~1.8 MB
    size = results.stat().st_size
    replay = ("--runtime", "langfuse", "--replay", REPO_ROOT / "cassettes/greeting-success.yaml")
    ran: list[Any] = []
    args = ("eval", GREETING, *replay, "--resume", results, "--format", "json")
    peak = peak_bytes(lambda: ran.append(cli(*args, "--output", results)))
    assert ran[0].code == 0, ran[0].err
    assert peak < 3 * size + _RUN, f"{peak / 2**20:.1f} MiB to resume a {size / 2**20:.1f} MiB file"
    summary = read_summary(results)
    assert summary is not None
    assert summary["total"] == 20_001  # every resumed case, and the contract's own


def test_merge_holds_where_each_case_is_not_the_cases(cli: Cli, tmp_path: Path) -> None:
    """A merge of one 290 MB shard took 1.4 GB, every case held to sort them; now their
    keys and line offsets. A case in two shards counts once, the later one's."""
    first = results_file(tmp_path / "first.json", 20_000)  # ~1.8 MB
    later = tmp_path / "later.json"
    later.write_text(
        first.read_text(encoding="utf-8").replace(
            '"case-7", "repeat": 0, "passed": true', '"case-7", "repeat": 0, "passed": false'
        ),
        encoding="utf-8",
    )
    merged = tmp_path / "merged.json"
    ran: list[Any] = []
    args = ("eval", GREETING, "--merge", first, "--merge", later, "--format", "json")
    peak = peak_bytes(lambda: ran.append(cli(*args, "--output", merged)))
    assert ran[0].code == 2, ran[0].err  # the later shard's case-7 failed
    size = first.stat().st_size
    assert peak < 5 * size + _RUN, (
        f"{peak / 2**20:.1f} MiB to merge two {size / 2**20:.1f} MiB files"
    )
    summary = read_summary(merged)
    assert summary is not None
    assert (summary["total"], summary["failed"], summary["run_name"]) == (20_000, 1, "big")


def test_a_results_file_without_newlines_or_with_a_huge_line_costs_a_bounded_read(
    tmp_path: Path,
) -> None:
    """Its first line, then each case line, was read whole: a file of no newlines cost
    its size, however large."""
    head = b'{"format": "templiqx.eval/v1", "contract_id": "greeting", "contract_version": "0.1.0"'
    flat = tmp_path / "flat.json"
    flat.write_bytes(head + b" " * (8 * 2**20))
    with pytest.raises(InvalidData, match="not a templiqx eval results file"):
        peak_bytes(lambda: list(read_results(flat)))
    long = tmp_path / "long.json"
    garbage = b'{"id": "' + b"y" * (40 * 2**20) + b'"}\n'
    long.write_bytes(head + b', "cases": [\n' + garbage + b',{"id": "ryan", "passed": true}\n')
    found: list[Any] = []
    peak = peak_bytes(lambda: found.extend(read_results(long)))
    assert [case.id for case in found] == ["ryan"]
    assert peak < 36 * 2**20, f"{peak / 2**20:.1f} MiB for a 40 MiB line"


def test_a_results_file_read_through_a_pipe_yields_its_cases(tmp_path: Path) -> None:
    """Each line's offset came of ``tell()``, which a pipe (``/dev/stdin``, a FIFO) refuses:
    its cases were an ``OSError``, said as "cannot read results"."""
    data = results_file(tmp_path / "results.json", 3).read_bytes()
    fifo = tmp_path / "results.fifo"
    os.mkfifo(fifo)

    def feed() -> None:
        with fifo.open("wb") as out:
            out.write(data)

    writer = threading.Thread(target=feed)
    writer.start()
    try:
        found = [case.id for case in read_results(fifo)]
    finally:
        writer.join()
    assert found == ["case-0", "case-1", "case-2"]


@pytest.mark.parametrize("where", ["a-file", "a-file/below", "/proc/nope"])
def test_an_output_directory_that_cannot_be_made_is_one_typed_error(
    cli: Cli, tmp_path: Path, where: str
) -> None:
    """With several contracts --output is a directory; making it failed as an internal
    FileExistsError (a file there), FileNotFoundError or PermissionError."""
    (tmp_path / "a-file").write_text("", encoding="utf-8")
    output = tmp_path / where if not where.startswith("/") else Path(where)
    replay = ("--runtime", "langfuse", "--replay", REPO_ROOT / "cassettes/greeting-success.yaml")
    ran = cli("eval", GREETING, REPO_ROOT / "reference/demo/greeting.yaml", *replay,
              "--output", output)  # fmt: skip
    assert ran.code == 1
    assert f"TQX_DATA_INVALID: --output: {output}: cannot be a directory" in ran.err
