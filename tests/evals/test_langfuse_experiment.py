"""With tracing on, an eval run lands in Langfuse as an experiment the UI shows.

Against ``FakeLangfuse``, whose request validation mirrors the server's schemas: the
dataset and its items, every case's generation as its experiment item's root
observation, each check, ``passed`` and the evaluators' scores on each trace and
generation, run-level scores on the run.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_langfuse.evals import stable_item_id
from tests.evals.conftest import GREETING, Cli, GreetingModel, write_cases
from tests.evals.fake_langfuse import PUBLIC_KEY, SECRET_KEY, FakeLangfuse

NAMES = ["Ryan", "Ada", "Grace"]


@pytest.fixture
def langfuse(
    greeting_model: GreetingModel, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeLangfuse]:
    fake = FakeLangfuse().start()
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC_KEY)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET_KEY)
    monkeypatch.setenv("LANGFUSE_BASE_URL", fake.base_url)
    monkeypatch.setenv("LANGFUSE_PROJECT_ID", "proj")
    yield fake
    fake.stop()


def _eval(cli: Cli, cases: Path, *more: str, dataset: str | None = "greeting") -> dict:
    on = ["--dataset", dataset] if dataset else []  # else the contract id
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--run-name", "nightly", "--evaluator", "tests.evals.evaluators:length",
        "--evaluator", "tests.evals.evaluators:polite", *on, *more,
    )  # fmt: skip
    assert ran.code == 0, ran.err
    return {"report": json.loads(ran.out), "err": ran.err}


def _generations(fake: FakeLangfuse) -> list[dict]:
    return [s for s in fake.spans if s["name"] == "greeting"]


def test_the_dataset_and_one_item_per_case_are_upserted_with_stable_ids(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    _eval(cli, cases)
    _eval(cli, cases)
    assert langfuse.errors == []
    assert list(langfuse.datasets) == ["greeting"]
    assert sorted(langfuse.items) == sorted(stable_item_id("greeting", n.lower()) for n in NAMES)
    item = langfuse.items[stable_item_id("greeting", "ada")]
    assert item.input == {"inputs": {"name": "Ada"}, "context": {"organization": "Blinqx"}}
    assert item.expectedOutput == {"greeting": "Hello Ada"}


def test_every_case_generation_is_its_experiment_item_s_root_observation(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    report = _eval(cli, cases)["report"]
    generations = _generations(langfuse)
    assert len(generations) == len(NAMES)
    assert langfuse.experiment_item_spans() == len(NAMES)
    dataset_id = langfuse.datasets["greeting"]["id"]
    experiment_ids = set()
    by_trace = {c["trace_id"]: c for c in report["cases"]}
    for span in generations:
        attributes = span["attributes"]
        case = by_trace[span["trace_id"]]  # each case reports the trace it landed in
        assert case["observation_id"] == span["span_id"]
        experiment_ids.add(attributes[A.EXPERIMENT_ID])
        assert attributes[A.EXPERIMENT_NAME] == "nightly"
        assert attributes[A.EXPERIMENT_DATASET_ID] == dataset_id
        assert attributes[A.EXPERIMENT_ITEM_ID] == stable_item_id("greeting", case["id"])
        assert attributes[A.EXPERIMENT_ITEM_ROOT_OBSERVATION_ID] == span["span_id"]
        expected = json.loads(attributes[A.EXPERIMENT_ITEM_EXPECTED_OUTPUT])
        assert expected == {"greeting": f"Hello {case['id'].title()}"}
        assert json.loads(attributes[A.EXPERIMENT_ITEM_METADATA]) == {"case_id": case["id"]}
    assert len(experiment_ids) == 1


def test_every_check_passed_and_evaluator_scores_land_on_each_trace_and_run_scores_on_the_run(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    cases = write_cases(
        tmp_path / "cases.jsonl", NAMES, **{"assert": [{"pointer": "/greeting", "contains": "y"}]}
    )
    ran = _eval(cli, cases, "--min-pass-rate", "0.3")
    assert langfuse.errors == []
    traces = {c["trace_id"]: c for c in ran["report"]["cases"]}
    per_case = [s for s in langfuse.scores if s.traceId is not None]
    assert all(traces[s.traceId]["observation_id"] == s.observationId for s in per_case)
    ryan = next(c for c in traces.values() if c["id"] == "ryan")
    landed = {s.name: (s.dataType, s.value) for s in per_case if s.traceId == ryan["trace_id"]}
    assert landed == {
        "check 0: expected_output": ("BOOLEAN", 1),
        "check 1: schema_valid": ("BOOLEAN", 1),
        "check 2: /greeting contains": ("BOOLEAN", 1),
        "passed": ("BOOLEAN", 1),
        "length": ("NUMERIC", 10.0),
        "polite": ("BOOLEAN", 1),
        "output_schema_valid": ("BOOLEAN", 1),  # the trace export's own, on every generation
    }
    ada = [s for s in per_case if traces[s.traceId]["id"] == "ada"]
    failed = {s.name: s.comment for s in ada if s.value == 0}
    assert failed == {
        "check 2: /greeting contains": '/greeting: expected contains "y", got "Hello Ada"',
        "passed": None,
    }
    generations = _generations(langfuse)
    experiment = generations[0]["attributes"][A.EXPERIMENT_ID]
    run_scores = {s.name: s for s in langfuse.scores if s.datasetRunId is not None}
    assert set(run_scores) == {"pass_rate", "mean_length", "mean_polite"}
    assert run_scores["pass_rate"].value == 1 / 3
    assert {s.datasetRunId for s in run_scores.values()} == {experiment}
    url = f"{langfuse.base_url}/project/proj/experiments/results?baseline={experiment}"
    assert ran["report"]["summary"]["run_url"] == url
    assert f"run: {url}" in ran["err"]


def test_the_shards_of_one_run_land_in_the_same_experiment(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada", "Grace", "Linus", "Alan"])
    _eval(cli, cases, "--shard", "1/2")
    _eval(cli, cases, "--shard", "2/2")
    generations = _generations(langfuse)
    assert len(generations) == 5
    assert len({g["attributes"][A.EXPERIMENT_ID] for g in generations}) == 1
    assert len({g["attributes"][A.EXPERIMENT_DATASET_ID] for g in generations}) == 1


def test_a_langfuse_that_refuses_costs_the_eval_nothing_but_one_warning(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    langfuse.fail_api = 403
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    ran = _eval(cli, cases)
    assert ran["report"]["summary"]["passed"] == len(NAMES)
    warned = [r.getMessage() for r in caplog.records if "Langfuse experiment" in r.getMessage()]
    assert len(warned) == 1
    assert "HTTP 403" in warned[0]
    # Nothing more after a refusal (the score posts are the trace export's own).
    sent = [call for call in langfuse.calls if not call.endswith(("/ingestion", "/scores"))]
    assert sent == ["POST /api/public/v2/datasets"]


def test_a_busy_langfuse_is_retried_after_its_retry_after(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    langfuse.fail_once = {"/api/public/v2/datasets", "/api/public/scores"}
    _eval(cli, write_cases(tmp_path / "cases.jsonl", ["Ryan"]))
    assert langfuse.calls.count("POST /api/public/v2/datasets") == 2
    assert list(langfuse.datasets) == ["greeting"]
    assert {s.name for s in langfuse.scores} >= {"passed", "pass_rate"}


def test_cases_come_from_a_langfuse_dataset_by_name_and_land_on_its_items(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    # Items made elsewhere: one in templiqx's shape, one whose input is the inputs.
    langfuse.seed(
        "support",
        "item-a",
        input={"inputs": {"name": "Ryan"}, "context": {"organization": "Blinqx"}},
        expectedOutput={"greeting": "Hello Ryan"},
        metadata={"case_id": "ryan"},
    )
    langfuse.seed(
        "support", "item-b", input={"name": "Ada"}, expectedOutput={"greeting": "Hello Ada"}
    )
    langfuse.seed("support", "item-c", input={"name": "Old"}, status="ARCHIVED")
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", "langfuse:support",
        "--format", "json", "--run-name", "from-dataset",
    )  # fmt: skip
    report = json.loads(ran.out)
    by_id = {c["id"]: c for c in report["cases"]}
    assert sorted(by_id) == ["item-b", "ryan"]  # case_id names a case, else the item id
    assert by_id["ryan"]["passed"]
    assert not by_id["item-b"]["passed"]  # its context lacks the required organization
    assert by_id["item-b"]["error"]["code"] == "TQX_VALUE_REQUIRED"
    assert sorted(langfuse.items) == ["item-a", "item-b", "item-c"]  # nothing new upserted
    (span,) = _generations(langfuse)
    assert span["attributes"][A.EXPERIMENT_ITEM_ID] == "item-a"
    assert span["attributes"][A.EXPERIMENT_DATASET_ID] == langfuse.datasets["support"]["id"]
    assert langfuse.errors == []


def test_a_missing_langfuse_dataset_is_a_command_failure(cli: Cli, langfuse: FakeLangfuse) -> None:
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", "langfuse:nope")
    assert ran.code == 1
    assert "Langfuse dataset 'nope': cannot read items (HTTP 404)" in ran.err


def test_without_a_project_id_the_key_s_project_keys_the_run(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LANGFUSE_PROJECT_ID")
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada", "Grace", "Linus"])
    first = _eval(cli, cases, "--shard", "1/2")["report"]
    _eval(cli, cases, "--shard", "2/2")
    generations = _generations(langfuse)
    assert len({g["attributes"][A.EXPERIMENT_ID] for g in generations}) == 1  # both shards
    assert "/project/proj-of-key/experiments/results?baseline=" in first["summary"]["run_url"]


def test_long_evaluator_text_is_clipped_in_langfuse_and_kept_whole_in_the_results(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan"])
    ran = _eval(cli, cases, "--evaluator", "tests.evals.evaluators:verbose")
    (case,) = ran["report"]["cases"]
    verbose = next(s for s in case["scores"] if s["name"] == "verbose")
    assert len(verbose["value"]) == len(verbose["comment"]) == 100_000
    (landed,) = [s for s in langfuse.scores if s.name == "verbose"]
    assert len(landed.value) <= 2000
    assert landed.value.endswith("…[truncated]")
    assert landed.comment is not None
    assert len(landed.comment) <= 2000


def test_a_dataset_whose_page_is_past_the_answer_bound_is_read_an_item_at_a_time(
    cli: Cli, langfuse: FakeLangfuse
) -> None:
    # Five items of 1 MB: one page of them is past the 4 MiB any Langfuse answer may be.
    for n in range(5):
        inputs = {"inputs": {"name": f"N{n}"}, "context": {"organization": "Blinqx"}}
        langfuse.seed("big", f"item-{n}", input=inputs, metadata={"pad": "x" * 1_000_000})
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", "langfuse:big", "--format", "json",
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert sorted(c["id"] for c in json.loads(ran.out)["cases"]) == [f"item-{n}" for n in range(5)]
    langfuse.seed("big", "item-huge", input={"name": "H"}, metadata={"pad": "x" * 5_000_000})
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", "langfuse:big")
    assert ran.code == 1
    assert "Langfuse dataset 'big': item 6 could not be read" in ran.err


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open descriptors")
def test_runs_on_fresh_event_loops_leave_no_langfuse_connection_open(
    cli: Cli, langfuse: FakeLangfuse, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    _eval(cli, cases)  # whatever is opened once per process (pools, exporters)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(5):  # each run is one asyncio.run, its own event loop
        _eval(cli, cases)
    gc.collect()
    # A leaking run leaves one socket per connection it opened (six here); other tests'
    # connections may still be closing, a few descriptors' worth.
    assert len(os.listdir("/proc/self/fd")) - before < 10
