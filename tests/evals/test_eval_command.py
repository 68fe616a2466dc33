"""``templiqx eval CONTRACT --runtime NAME``: runs real calls, reports, gates, resumes."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

from tests.conftest import REPO_ROOT
from tests.evals.conftest import GREETING, Cli, GreetingModel, write_cases

NAMES = ["Ryan", "Ada", "Grace", "Linus", "Alan", "Barbara"]


def test_without_a_runtime_it_is_the_scripted_self_check(cli: Cli) -> None:
    ran = cli("eval", GREETING)
    assert ran.code == 0
    report = json.loads(ran.out)
    assert report["operation"] == "test_package"
    assert report["result"]["cases"][0]["contract_id"] == "greeting"


def test_the_contract_evals_run_against_the_model_and_pass(
    cli: Cli, greeting_model: GreetingModel
) -> None:
    ran = cli("eval", GREETING, "--runtime", "langfuse")
    assert ran.code == 0, ran.err
    assert greeting_model.seen == ["Ryan"]
    assert "1/1 passed" in ran.out
    assert "greeting 0.1.0" in ran.out  # named by the contract's id


def test_a_failing_case_fails_the_gate_and_is_named(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
    bad = tmp_path / "bad.jsonl"
    bad.write_text(cases.read_text().replace('"Hello Ada"', '"Hello Ryan"'), encoding="utf-8")
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", bad)
    assert ran.code == 2
    assert "1/2 passed, 1 failed" in ran.out
    assert '✗ ada: expected_output: got {"greeting": "Hello Ada"}' in ran.out
    gated = cli("eval", GREETING, "--runtime", "langfuse", "--cases", bad, "--min-pass-rate", "0.5")
    assert gated.code == 0
    assert cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases).code == 0


def test_json_reports_every_case_and_the_summary(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", NAMES[:3], assert_=None)
    cases.write_text(
        cases.read_text().replace('"assert_": null', '"assert": [{"max_tokens": 100}]')
    )
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json")
    assert ran.code == 0, ran.err
    report = json.loads(ran.out)
    assert [c["id"] for c in sorted(report["cases"], key=lambda c: c["id"])] == [
        "ada",
        "grace",
        "ryan",
    ]
    case = report["cases"][0]
    assert {a["name"] for a in case["assertions"]} == {"expected_output", "schema_valid", "tokens"}
    assert case["usage"] == {"input": 20, "output": 7, "total": 27}
    assert case["latency_ms"] > 0
    assert case["scores"] == []
    assert "trace_id" in case
    summary = report["summary"]
    assert summary["contract_id"] == "greeting"
    assert (summary["total"], summary["passed"], summary["failed"], summary["errored"]) == (
        3,
        3,
        0,
        0,
    )
    assert summary["pass_rate"] == 1.0
    assert summary["averages"]["total_tokens"] == 27
    assert summary["run_name"].startswith("greeting v0.1.0 ")


def test_junit_has_a_testcase_per_case_and_repeat_and_a_failure_per_failed_one(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
    cases.write_text(cases.read_text().replace('"Hello Ada"', '"Hello Ryan"'))
    out = tmp_path / "junit.xml"
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--repeat", "2",
        "--format", "junit", "--output", out,
    )  # fmt: skip
    assert ran.code == 2
    suite = ET.parse(out).getroot().find("testsuite")
    assert suite is not None
    testcases = suite.findall("testcase")
    assert sorted(t.get("name") for t in testcases) == ["ada", "ada#1", "ryan", "ryan#1"]
    failures = [t for t in testcases if t.find("failure") is not None]
    assert sorted(t.get("name") for t in failures) == ["ada", "ada#1"]
    assert suite.get("failures") == "2"
    assert len(greeting_model.seen) == 4


def test_shards_split_the_cases_deterministically_and_completely(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    ids = []
    for shard in ("1/3", "2/3", "3/3"):
        ran = cli(
            "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--shard", shard,
            "--format", "json",
        )  # fmt: skip
        ids.append(sorted(c["id"] for c in json.loads(ran.out)["cases"]))
    assert sorted(i for shard in ids for i in shard) == sorted(n.lower() for n in NAMES)
    again = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--shard", "2/3",
        "--format", "json",
    )  # fmt: skip
    assert sorted(c["id"] for c in json.loads(again.out)["cases"]) == ids[1]


def test_resume_runs_only_the_cases_a_cut_short_file_did_not_finish(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    results = tmp_path / "results.json"
    first = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--output", results, "--concurrency", "1",
    )  # fmt: skip
    assert first.code == 0
    json.loads(results.read_text())  # a complete file is one JSON document
    lines = results.read_text().splitlines()
    results.write_text("\n".join(lines[:3]) + '\n,{"id": "trunc', encoding="utf-8")  # cut
    greeting_model.seen.clear()
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--resume", results, "--output", results,
    )  # fmt: skip
    assert ran.code == 0, ran.err
    assert len(greeting_model.seen) == len(NAMES) - 2  # two cases were finished
    report = json.loads(results.read_text())
    assert report["summary"]["total"] == len(NAMES)
    assert sorted(c["id"] for c in report["cases"]) == sorted(n.lower() for n in NAMES)


def test_a_rate_limited_case_waits_and_passes_and_only_a_case_that_still_fails_errors(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    greeting_model.limit_once.add("Ada")
    greeting_model.fail["Grace"] = 400
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada", "Grace"])
    results = tmp_path / "results.json"
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--output", results,
    )  # fmt: skip
    assert ran.code == 2
    report = json.loads(results.read_text())
    by_id = {c["id"]: c for c in report["cases"]}
    assert by_id["ada"]["passed"]
    assert greeting_model.seen.count("Ada") == 2  # the 429, then the answer
    assert by_id["grace"]["errored"]
    assert by_id["grace"]["error"]["code"] == "TQX_RUNTIME_PERMANENT"
    assert report["summary"]["errored"] == 1
    # --retry-errors re-runs only the errored case, once it can pass.
    del greeting_model.fail["Grace"]
    greeting_model.seen.clear()
    again = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--resume", results, "--retry-errors",
    )  # fmt: skip
    assert again.code == 0, again.err
    assert greeting_model.seen == ["Grace"]
    assert json.loads(again.out)["summary"]["passed"] == 3


def test_custom_evaluators_score_every_case_and_a_false_boolean_fails_it(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--evaluator", "tests.evals.evaluators:length",
        "--evaluator", "tests.evals.evaluators:polite",
        "--evaluator", "tests.evals.evaluators:is_ryan",
    )  # fmt: skip
    assert ran.code == 2
    report = json.loads(ran.out)
    by_id = {c["id"]: c for c in report["cases"]}
    assert {s["name"]: s["value"] for s in by_id["ada"]["scores"]} == {
        "length": 9,
        "polite": True,
        "is_ryan": False,
    }
    assert by_id["ryan"]["passed"]
    assert not by_id["ada"]["passed"]
    assert report["summary"]["averages"]["scores"] == {"length": 9.5, "polite": 1.0, "is_ryan": 0.5}


def test_an_evaluator_that_raises_fails_its_case_not_the_run(
    cli: Cli, greeting_model: GreetingModel
) -> None:
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--format", "json",
        "--evaluator", "tests.evals.evaluators:broken",
    )  # fmt: skip
    assert ran.code == 2
    (case,) = json.loads(ran.out)["cases"]
    assert {
        "name": "broken",
        "passed": False,
        "detail": "raised RuntimeError",
        "evaluator": True,
    } in case["assertions"]


def test_baseline_diff_lists_regressions_first(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
    baseline = tmp_path / "baseline.json"
    cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json",
        "--output", baseline,
    )  # fmt: skip
    greeting_model.fail["Ada"] = 400
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--baseline", baseline)
    assert ran.code == 2
    diff = ran.out[ran.out.index("Evaluation diff") :]
    assert "pass rate 100.0% → 50.0% (1 regression(s), 0 fix(es))" in diff
    assert diff.splitlines()[2] == "  ✔ → ✗ ada"


def test_command_failures_exit_1_with_one_line(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    for args, message in [
        (("--cases", tmp_path / "missing.jsonl"), "cannot read"),
        (("--evaluator", "nope"), "evaluator 'nope': cannot import it"),
        (("--replay", tmp_path / "none.yaml"), "none.yaml does not exist"),
        (("--replay", tmp_path), "holds no cassette"),
    ]:
        ran = cli("eval", GREETING, "--runtime", "langfuse", *args)
        assert ran.code == 1, (args, ran.err)
        assert ran.err.count("\n") == 1
        assert message in ran.err
        assert "Traceback" not in ran.err
    unknown = cli("eval", GREETING, "--runtime", "no-such-runtime")
    assert unknown.code == 1
    assert "unknown runtime" in unknown.err


def test_a_flag_value_out_of_range_is_a_usage_error(cli: Cli) -> None:
    """As argparse's own type errors: exit 2, the usage, then what is wrong with which flag."""
    for args, message in [
        (("--shard", "3/2"), "argument --shard: shard '3/2' is not I/N with 1 <= I <= N"),
        (("--shard", "1-2"), "not I/N"),
        (("--min-pass-rate", "most"), "argument --min-pass-rate: Input should be a valid number"),
        (("--min-pass-rate", "nan"), "finite number"),
        (("--min-pass-rate", "2"), "less than or equal to 1"),
        (("--concurrency", "0"), "argument --concurrency: Input should be greater than or equal"),
        (("--concurrency=-1",), "argument --concurrency: Input should be greater than or equal"),
        (("--repeat", "x"), "argument --repeat: Input should be a valid integer"),
        (("--attempts", "\uff13"), "argument --attempts: Input should be a valid integer"),
    ]:
        ran = cli("eval", GREETING, "--runtime", "langfuse", *args)
        assert (ran.code, ran.out) == (2, ""), (args, ran.err)
        assert ran.err.startswith("usage: templiqx eval")
        assert message in ran.err.splitlines()[-1]


def test_repair_above_the_most_tries_is_a_usage_error(cli: Cli) -> None:
    """``--repair 11`` is out of range as ``--repair 0`` is: exit 2 with the usage, not a
    command that failed (exit 1) when the repairing runtime refused it."""
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--repair", "11")
    assert (ran.code, ran.out) == (2, "")
    assert ran.err.startswith("usage: templiqx eval")
    assert "argument --repair: Input should be less than or equal to 10" in ran.err


def test_replay_runs_the_suite_offline_with_the_same_fingerprints(cli: Cli) -> None:
    cassette = REPO_ROOT / "cassettes" / "greeting-success.yaml"
    runs = [
        cli("eval", GREETING, "--runtime", "langfuse", "--replay", cassette, "--format", "json")
        for _ in range(2)
    ]
    assert [r.code for r in runs] == [0, 0], runs[0].err
    prints = [json.loads(r.out)["cases"][0]["output_fingerprint"] for r in runs]
    assert prints[0] == prints[1]


def test_the_console_script_runs_an_eval_and_exits_with_the_gate(
    greeting_model: GreetingModel, tmp_path: Path
) -> None:
    import os

    script = Path(sys.executable).with_name("templiqx")
    done = subprocess.run(
        [str(script), "eval", str(GREETING), "--runtime", "langfuse", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "1/1 passed" in done.stdout


def test_replay_takes_a_directory_of_cassettes_one_per_case(cli: Cli, tmp_path: Path) -> None:
    import shutil

    cassettes = tmp_path / "cassettes"
    cassettes.mkdir()
    shutil.copy(REPO_ROOT / "cassettes" / "greeting-success.yaml", cassettes / "ryan.yaml")
    (cassettes / "README.txt").write_text("not a cassette", encoding="utf-8")
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--replay", cassettes, "--format", "json")
    assert ran.code == 0, ran.err
    (case,) = json.loads(ran.out)["cases"]
    assert case["passed"]


def test_run_flags_without_a_runtime_are_a_usage_error(cli: Cli, tmp_path: Path) -> None:
    ran = cli("eval", GREETING, "--cases", tmp_path / "cases.jsonl")
    assert ran.code == 2
    assert "--cases runs cases against a model: add --runtime NAME" in ran.err


def test_an_empty_shard_does_not_pass_silently(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    # As pytest's "no tests ran" (exit 5): a shard that ran nothing is not a pass.
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan"])
    codes = []
    for shard in ("1/2", "2/2"):
        ran = cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--shard", shard)
        codes.append((ran.code, "no case ran" in ran.err))
    assert sorted(codes) == [(0, False), (5, True)]


def test_the_shards_results_files_merge_into_one_run(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    greeting_model.fail["Ada"] = 400
    cases = write_cases(tmp_path / "cases.jsonl", NAMES)
    files = []
    for index in (1, 2):
        files.append(tmp_path / f"shard-{index}.json")
        cli(
            "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--shard", f"{index}/2",
            "--run-name", "ci-7", "--format", "json", "--output", files[-1],
        )  # fmt: skip
    merged = tmp_path / "merged.json"
    ran = cli("eval", GREETING, "--merge", files[0], "--merge", files[1], "--output", merged)
    assert ran.code == 2  # ada errored
    document = json.loads(merged.read_text())
    assert sorted(c["id"] for c in document["cases"]) == sorted(n.lower() for n in NAMES)
    summary = document["summary"]
    assert (summary["total"], summary["errored"], summary["run_name"]) == (6, 1, "ci-7")
    assert "5/6 passed" in ran.out
    gated = cli(
        "eval", GREETING, "--merge", files[0], "--merge", files[1], "--min-pass-rate", "0.8"
    )
    assert gated.code == 0


def test_a_judge_contract_scores_each_case_through_the_same_runtime(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    judge = REPO_ROOT / "tests" / "evals" / "judge.yaml"
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
    ran = cli(
        "eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--judge", judge,
        "--format", "json", "--concurrency", "1",
    )  # fmt: skip
    assert ran.code == 2  # the judge finds Ada's greeting wanting
    assert greeting_model.seen.count("judge") == 2
    by_id = {c["id"]: c for c in json.loads(ran.out)["cases"]}
    assert by_id["ryan"]["scores"] == [
        {"name": "polite-judge", "value": True, "comment": "judged the greeting"}
    ]
    assert by_id["ryan"]["passed"]
    judged = {"name": "polite-judge", "passed": False, "detail": "judged the greeting"}
    assert {**judged, "evaluator": True} in by_id["ada"]["assertions"]


def test_ctrl_c_leaves_a_closed_resumable_file_and_says_how_far_it_got(tmp_path: Path) -> None:
    import os
    import signal
    import time

    from tests.slow_upstream import slow_upstream

    # Enough cases (40 s of upstream time) that the run is still going when the signal
    # arrives, however loaded the machine.
    cases = write_cases(tmp_path / "cases.jsonl", [f"P{i}" for i in range(400)])
    results = tmp_path / "results.json"
    script = Path(sys.executable).with_name("templiqx")
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("LANGFUSE_", "TEMPLIQX_"))}
    with slow_upstream(0.2) as upstream:
        env = {
            **clean,
            "TEMPLIQX_MODEL_BASE_URL": upstream.base_url,
            "TEMPLIQX_MODEL": "loopback-model",
            "TEMPLIQX_MODEL_API_KEY": "sk-loopback",
        }
        # A suite started in the background (``cmd &`` in a script) ignores SIGINT, and an
        # ignored signal stays ignored across exec: the command must start with the default.
        previous = signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            process = subprocess.Popen(
                [str(script), "eval", str(GREETING), "--runtime", "langfuse", "--cases",
                 str(cases), "--concurrency", "2", "--output", str(results)],
                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            )  # fmt: skip
        finally:
            signal.signal(signal.SIGINT, previous)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and (
            not results.exists() or results.read_text().count("\n") < 4
        ):
            time.sleep(0.05)  # a few cases finished
        process.send_signal(signal.SIGINT)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    summary = json.loads(results.read_text())["summary"]
    assert summary["interrupted"] is True
    assert 3 <= summary["total"] < 400
    assert f"interrupted after {summary['total']} finished case(s); --resume" in err
    assert "Traceback" not in err


def test_several_contracts_run_in_turn_each_with_its_own_results_file(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    other = tmp_path / "greeting-b.yaml"
    other.write_text(
        GREETING.read_text().replace("id: greeting\n", "id: greeting-b\n"), encoding="utf-8"
    )
    out = tmp_path / "results"
    ran = cli("eval", GREETING, other, "--runtime", "langfuse", "--format", "json", "--output", out)
    assert ran.code == 0, ran.err
    for contract_id in ("greeting", "greeting-b"):
        document = json.loads((out / f"{contract_id}.json").read_text())
        assert document["summary"]["contract_id"] == contract_id
        assert document["summary"]["passed"] == 1
    greeting_model.fail["Ryan"] = 400
    failed = cli("eval", GREETING, other, "--runtime", "langfuse")
    assert failed.code == 2
    assert failed.out.count("0/1 passed") == 2
    assert cli("eval", GREETING, other, "--runtime", "langfuse", "--format", "json").code == 1
    assert cli("eval", GREETING, other).code == 2  # the self-check takes one contract


def test_repair_sends_an_answer_that_is_not_json_back_and_says_the_tries(
    cli: Cli, greeting_model: GreetingModel, tmp_path: Path
) -> None:
    cases = write_cases(tmp_path / "cases.jsonl", ["Ryan", "Ada"])
    greeting_model.prose_once = {"Ryan"}
    plain = cli("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--format", "json")
    assert plain.code == 2
    errored = {c["id"]: c for c in json.loads(plain.out)["cases"]}
    assert errored["ryan"]["error"]["code"] == "TQX_RUNTIME_INVALID_RESPONSE"
    assert "attempts" not in errored["ada"]  # a run without repair says nothing of tries

    greeting_model.prose_once = {"Ryan"}
    greeting_model.seen.clear()
    args = ("eval", GREETING, "--runtime", "langfuse", "--cases", cases, "--repair", "3")
    ran = cli(*args, "--format", "json")
    assert ran.code == 0, ran.err
    tries = {c["id"]: c["attempts"] for c in json.loads(ran.out)["cases"]}
    assert tries == {"ryan": 2, "ada": 1}
    assert sorted(greeting_model.seen) == ["Ada", "Ryan", "Ryan"]  # one more round trip

    greeting_model.prose_once = {"Ada"}
    table = cli(*args).out.splitlines()
    assert table[0].split() == ["case", "assertions", "scores", "latency", "tokens", "tries"]
    assert [row.split()[-1] for row in table[2:4]] == ["2", "1"]  # ada, then ryan


def test_repair_takes_a_count_of_at_least_one(cli: Cli, greeting_model: GreetingModel) -> None:
    ran = cli("eval", GREETING, "--runtime", "langfuse", "--repair", "0")
    assert ran.code == 2
    assert "argument --repair: Input should be greater than or equal to 1" in ran.err
    assert greeting_model.seen == []


def test_a_baseline_of_another_contract_is_refused(cli: Cli, tmp_path: Path) -> None:
    """Another version is what a baseline is for; another contract's cases diff as nonsense."""
    baseline = tmp_path / "baseline.json"
    baseline.write_text(
        '{"format": "templiqx.eval/v1", "contract_id": "ticket-summary", '
        '"contract_version": "9.9.9", "cases": [\n]}\n',
        encoding="utf-8",
    )
    ran = cli("eval", GREETING, "--runtime", "scripted", "--baseline", baseline)
    assert ran.code == 1
    assert "--baseline" in ran.err
    assert "'ticket-summary'" in ran.err
