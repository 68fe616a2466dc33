"""``templiqx eval CONTRACT --runtime NAME``: the ``eval`` entry point of ``templiqx.commands``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO, Annotated, Any, NamedTuple, TextIO

from pydantic import Field, TypeAdapter, ValidationError

from templiqx_core import Contract, InvalidData, PortError, RuntimeAdapter
from templiqx_core.adapters import RuntimeOptions, load_document
from templiqx_core.evals import MAX_REPAIR_ATTEMPTS, EvalCaseSpec, load_runtime

from .._config import LangfuseConfig
from .._runtime import RetryingRuntime
from ._report import (
    CaseResult,
    ResultsWriter,
    Summary,
    baseline_diff,
    read_results,
    read_summary,
    table,
    write_junit,
)
from ._runner import arun_eval, fetch_dataset_cases, judge_evaluator, resolve_contract

EXIT_OK, EXIT_GATE, EXIT_NO_CASES = 0, 2, 5


def _typed(annotation: Any) -> Callable[[str], Any]:
    """An argparse type of a pydantic one: a wrong value is a usage error (exit 2)."""
    adapter = TypeAdapter(annotation)

    def parse(text: str) -> Any:
        try:
            return adapter.validate_strings(text)
        except ValidationError as error:
            raise argparse.ArgumentTypeError(error.errors()[0]["msg"]) from None

    return parse


_count = _typed(Annotated[int, Field(ge=1)])
_tries = _typed(Annotated[int, Field(ge=1, le=MAX_REPAIR_ATTEMPTS)])  # what repair makes
_rate = _typed(Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)])


def _shard(text: str) -> tuple[int, int]:
    found = re.fullmatch("([0-9]{1,30})/([0-9]{1,30})", text)
    index, count = (int(part) for part in found.groups()) if found else (0, 0)
    if not 1 <= index <= count:
        raise argparse.ArgumentTypeError(f"shard {text!r} is not I/N with 1 <= I <= N")
    return index, count


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="templiqx eval",
        description="Run a contract's eval cases against a model and gate on them, or merge "
        "shards' results. Exit 0 passed, 2 failed (or a usage error), 5 no case ran, 1 an error.",
    )
    add, many = parser.add_argument, "append"
    add("contract", type=Path, nargs="+", help="contract YAML (several run one by one)")
    add("--capability", action=many, metavar="NAME", help="target capability (repeatable)")
    add("--runtime", help="runtime entry point to run the cases on (scripted, langfuse, yours)")
    add("--replay", type=Path, metavar="CASSETTE|DIR", help="answer calls from cassette(s)")
    add("--cases", type=Path, metavar="FILE", help="JSONL/YAML cases, or langfuse:DATASET")
    add("--evaluator", action=many, metavar="MODULE:FUNCTION", help="a custom evaluator")
    add("--judge", action=many, type=Path, metavar="CONTRACT", help="a judge contract")
    add("--concurrency", type=_count, default=10, metavar="N", help="calls in flight (10)")
    add("--repeat", type=_count, default=1, metavar="K", help="run every case K times")
    add("--attempts", type=_count, default=4, metavar="N", help="tries per call on 429/5xx (4)")
    add("--repair", type=_tries, metavar="N", help="up to N tries of an invalid answer, repaired")
    add("--shard", type=_shard, metavar="I/N", help="run shard I of N (split by case id)")
    add("--dataset", metavar="NAME", help="Langfuse dataset name (default: the contract id)")
    add("--run-name", metavar="NAME", help="run name (default: contract, version, time)")
    add("--format", choices=("table", "json", "junit"), default="table")
    add("--output", type=Path, metavar="FILE", help="the results as cases finish (or JUnit)")
    add("--min-pass-rate", type=_rate, metavar="R", help="gate: pass when at least R (0..1) pass")
    add("--promote", metavar="LABEL", help="langfuse:NAME@L: move LABEL to the version run")
    add("--baseline", type=Path, metavar="FILE", help="diff against an earlier --format json")
    add("--resume", type=Path, metavar="FILE", help="skip the cases a results file finished")
    add("--retry-errors", action="store_true", help="with --resume: re-run its errored cases")
    add("--no-progress", action="store_true", help="no progress bar on stderr")
    add("--merge", action=many, type=Path, metavar="FILE", help="merge shards' results files")
    return parser


def main(argv: list[str]) -> int:
    """Each report is read back from its results file: a run keeps only its failed cases."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.merge is None and args.runtime is None:
        flags = (a.split("=")[0] for a in argv if a.startswith("--"))
        given = next((f for f in flags if f != "--capability"), "--runtime")
        parser.error(f"{given} runs cases against a model: add --runtime NAME")
    out, err = sys.stdout, sys.stderr
    promotions = _checked(args)
    with tempfile.TemporaryDirectory(prefix="templiqx-eval-") as directory:
        scratch = Path(directory)
        plan = _files(args, scratch)
        summaries = [_merge(args.merge, plan[0])] if args.merge else _run(args, plan, scratch, err)
        for files, summary in zip(plan, summaries, strict=True):
            _print_report(args, files, summary, out, err)
    if not all(summary.gate(args.min_pass_rate) for summary in summaries):
        return EXIT_GATE
    if any(summary.total == 0 for summary in summaries):
        return EXIT_NO_CASES  # nothing passed: neither a pass nor a promotion
    from .._prompts import promote_label

    for name, version in promotions:  # a failure: exit 1, said on one line
        promote_label(name, version, args.promote)
        err.write(f"promoted langfuse:{name}#{version} to {args.promote}\n")
    return EXIT_OK


def _runtime(args: argparse.Namespace, scratch: Path) -> RuntimeAdapter:
    replay: Path | None = args.replay
    if replay is not None and replay.is_dir():  # one cassette of all: replay matches by request
        import yaml

        interactions: list[object] = []
        for path in sorted(replay.glob("*.yaml")):
            try:
                interactions.extend(load_document(path)["interactions"])
            except (PortError, LookupError, TypeError):
                raise InvalidData(f"--replay: {path} is not a cassette") from None
        if not interactions:
            raise InvalidData(f"--replay: {replay} holds no cassette (*.yaml)")
        replay = scratch / "cassette.yaml"
        replay.write_text(yaml.safe_dump({"interactions": interactions, "version": 1}), "utf-8")
    inner = load_runtime(args.runtime, RuntimeOptions(replay=replay, env=dict(os.environ)))
    # A 429 waits its retry-after and tries again; only what still fails is errored.
    return RetryingRuntime(inner, attempts=args.attempts, max_wait_s=30.0)


def _checked(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The versions ``--promote`` pins, or a refusal of the flags together."""
    if args.merge is not None and len(args.contract) != 1:
        raise InvalidData("--merge combines the results of one contract")
    if args.merge is not None and args.promote is not None and "#" not in str(args.contract[0]):
        raise InvalidData("--merge --promote: name the version the shards ran (langfuse:NAME#N)")
    if args.promote is None:
        return []
    # Each langfuse: contract pinned to the version its label names now, so the run
    # evaluates, and the gate promotes, that version.
    from .._prompts import SCHEME, check_label, pin

    check_label(args.promote)
    if args.shard is not None:
        raise InvalidData("--promote gates on the whole run: promote from --merge of all shards")
    pinned = []
    for index, path in enumerate(args.contract):
        if not str(path).startswith(SCHEME):
            raise InvalidData(f"--promote: {path} is not a langfuse:NAME@LABEL contract")
        reference, name, version = pin(str(path))
        args.contract[index] = Path(reference)
        pinned.append((name, version))
    return pinned


class _Files(NamedTuple):
    contract: Contract
    results: Path
    output: Path | None
    resume: Path | None
    baseline: Path | None


def _files(args: argparse.Namespace, scratch: Path) -> list[_Files]:
    """For several contracts, ``--output``, ``--resume`` and ``--baseline`` are directories."""
    several = len(args.contract) > 1
    if several and args.format == "json" and args.output is None:
        raise InvalidData("--format json with several contracts needs --output DIR")
    if several and args.output is not None:
        try:
            args.output.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file there, or no right to write
            why = f"cannot be a directory ({type(error).__name__})"
            raise InvalidData(f"--output: {args.output}: {why}") from None

    def at(directory: Path | None, name: str, suffix: str = ".json") -> Path | None:
        return directory / f"{name}{suffix}" if directory is not None and several else directory

    found = []
    for index, path in enumerate(args.contract):
        contract = resolve_contract(path)
        output = at(args.output, contract.id, ".xml" if args.format == "junit" else ".json")
        results = scratch / f"results-{index}.json"  # JUnit is written at the end
        if output is not None and args.format != "junit":
            results = output
        resume, baseline = at(args.resume, contract.id), at(args.baseline, contract.id)
        found.append(_Files(contract, results, output, resume, baseline))
    return found


def _run(args: argparse.Namespace, plan: list[_Files], scratch: Path, err: TextIO) -> list[Summary]:
    cases: Path | list[EvalCaseSpec] | None = args.cases
    dataset: str | None = args.dataset
    if args.cases is not None and str(args.cases).startswith("langfuse:"):  # a dataset's items
        name = str(args.cases).removeprefix("langfuse:")
        cases = fetch_dataset_cases(LangfuseConfig.from_env(os.environ), name)
        dataset = dataset or name  # the run lands on the dataset it read
    for files in plan:  # checked before any call: another contract's file is refused now
        for path, flag in ((files.baseline, "--baseline"), (files.resume, "--resume")):
            if path is not None:
                next(read_results(path, files.contract, flag), None)
    runtime = _runtime(args, scratch)

    async def run_all() -> list[Summary]:
        judges = [judge_evaluator(path, runtime) for path in args.judge or ()]
        summaries = []
        for index, files in enumerate(plan):
            resume: Iterable[CaseResult] = ()
            if files.resume is not None:  # read from a copy: --output may be the same file
                resume = read_results(shutil.copyfile(files.resume, scratch / f"{index}.json"))
            with _open(files.results) as stream:
                try:
                    report = await arun_eval(
                        files.contract,
                        runtime=runtime,
                        cases=cases,
                        capabilities=args.capability,
                        concurrency=args.concurrency,
                        repeat=args.repeat,
                        shard=args.shard,
                        run_name=args.run_name,
                        evaluators=[*(args.evaluator or ()), *judges],
                        output=stream,
                        resume=resume,
                        retry_errors=args.retry_errors,
                        progress=None if args.no_progress or not err.isatty() else err,
                        dataset=dataset,
                        repair=args.repair,
                    )
                except (KeyboardInterrupt, asyncio.CancelledError):  # asyncio.run cancels on SIGINT
                    # The results file holds every finished case and a partial summary.
                    finished = sum(1 for _ in read_results(files.results))
                    err.write(f"templiqx: eval interrupted after {finished} finished case(s)")
                    kept = files.results == files.output
                    err.write(f"; --resume {files.results} runs the rest\n" if kept else "\n")
                    raise
            summaries.append(report.summary)
        return summaries

    try:
        return asyncio.run(run_all())
    finally:
        runtime.close()


def _merge(paths: list[Path], files: _Files) -> Summary:
    """Every case once (a later file's record of a case wins), the summary recomputed."""
    contract = files.contract
    last = {  # a case's key and the file that holds it last: the cases themselves are not held
        case.key: index
        for index, path in enumerate(paths)
        for case in read_results(path, contract, "--merge")
    }
    summary = Summary(contract.id, contract.version, "")
    for path in paths:
        found = read_summary(path) or {}
        summary.run_name = summary.run_name or found.get("run_name") or ""
        summary.run_url = summary.run_url or found.get("run_url")
    summary.run_name = summary.run_name or "merged"
    with _open(files.results) as stream:
        writer = ResultsWriter(stream, contract.id, contract.version)
        for index, path in enumerate(paths):
            for case in read_results(path):
                if last.get(case.key) == index:
                    del last[case.key]
                    summary.add(case)
                    writer.write(case)
        writer.close(summary)
    return summary


def _open(path: Path) -> IO[str]:
    try:
        return path.open("w", encoding="utf-8")
    except OSError as error:
        raise InvalidData(f"--output: {path}: cannot write ({type(error).__name__})") from None


def _print_report(
    args: argparse.Namespace, files: _Files, summary: Summary, out: TextIO, err: TextIO
) -> None:
    results = files.results
    if args.format == "table":
        out.write(table(summary, read_results(results)) + "\n")
    elif args.format == "json" and files.output is None:
        out.write(results.read_text(encoding="utf-8"))
    elif args.format == "junit":
        with contextlib.nullcontext(out) if files.output is None else _open(files.output) as to:
            write_junit(summary, read_results(results), to)
    if files.baseline is not None:
        diff = baseline_diff(summary, read_results(results), read_results(files.baseline))
        (out if args.format == "table" else err).write(diff + "\n")
    if summary.total == 0:
        err.write(f"templiqx: eval {summary.contract_id}: no case ran (none, or an empty shard)\n")
    if args.format != "table":  # the table says both
        err.write(f"eval {summary.contract_id}: {summary.passed}/{summary.total} passed\n")
        err.write(f"run: {summary.run_url}\n" if summary.run_url else "")
    out.flush()
