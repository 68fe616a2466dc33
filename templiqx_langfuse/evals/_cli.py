"""``templiqx eval CONTRACT --runtime NAME``, the core CLI's ``templiqx.commands`` entry point
``eval``. Exit 0 the gate passed, 2 it did not or a usage error, 5 no case ran (as pytest's "no
tests ran"), 1 the command itself failed (a typed error the CLI prints on one line)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, NamedTuple, TextIO

from templiqx_core import Contract, InvalidData, PortError, RuntimeAdapter
from templiqx_core.adapters import load_document
from templiqx_core.evals import MAX_REPAIR_ATTEMPTS, EvalCaseSpec, RuntimeOptions, load_runtime

from .._config import LangfuseConfig
from .._runtime import RetryingRuntime
from ._experiment import fetch_dataset_cases
from ._report import (
    CaseResult,
    ResultsWriter,
    Summary,
    baseline_diff,
    case_at,
    located_results,
    read_results,
    read_summary,
    table,
    write_junit,
)
from ._runner import arun_eval, judge_evaluator, parse_shard, resolve_contract

EXIT_OK, EXIT_GATE, EXIT_NO_CASES = 0, 2, 5
#: ``--cases langfuse:NAME``: the cases are the items of Langfuse dataset NAME.
LANGFUSE_CASES = "langfuse:"


def _count(text: str, most: int | None = None) -> int:
    """A count of at least 1; argparse reports anything else as a usage error (exit 2)."""
    if not re.fullmatch(r"-?[0-9]+", text):  # int() also reads "1_0" and other digits
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}")
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    if most is not None and value > most:
        raise argparse.ArgumentTypeError(f"at most {most}")
    return value


def _tries(text: str) -> int:
    return _count(text, MAX_REPAIR_ATTEMPTS)  # what a repairing runtime makes


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0.0 <= value <= 1.0:  # NaN too
        raise argparse.ArgumentTypeError("must be within [0, 1]")
    return value


def _shard(text: str) -> tuple[int, int]:
    try:
        return parse_shard(text)
    except InvalidData as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="templiqx eval",
        description="Run a contract's eval cases against a model (--runtime NAME) and gate "
        "on them, or merge shards' results (--merge); without either, `templiqx eval "
        "CONTRACT` self-checks its fixtures on the scripted runtime.",
        epilog="exit status: 0 the gate passed, 2 it did not (or a usage error), "
        "5 no case ran (an empty shard), 1 the command itself failed",
    )
    add, many = parser.add_argument, "append"
    add("contract", type=Path, nargs="+", help="contract YAML (several run one by one)")
    add("--capability", action=many, metavar="NAME", help="target capability (repeatable)")
    add("--runtime", help="runtime entry point to run the cases on (langfuse, a host's own)")
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
    add("--json", action="store_true", help=argparse.SUPPRESS)  # the core eval's flag
    add("--merge", action=many, type=Path, metavar="FILE", help="merge shards' results files")
    return parser


def main(argv: list[str]) -> int:
    """Each report is read back from its results file: a run keeps only its failed cases."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.merge is not None and args.runtime is not None:
        parser.error("--merge combines results files; it runs no --runtime")
    if args.merge is None and args.runtime is None:
        flags = (a.split("=")[0] for a in argv if a.startswith("--"))
        given = next((f for f in flags if f not in ("--capability", "--json")), "--runtime")
        parser.error(f"{given} runs cases against a model: add --runtime NAME")
    out, err = sys.stdout, sys.stderr
    promotions = _checked(args)
    with contextlib.ExitStack() as stack:
        scratch = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="templiqx-eval-")))
        plan = _files(args, scratch)
        if args.merge is not None:
            summaries = [_merge(args.merge, plan[0])]
        else:
            summaries = _run(args, plan, scratch, err)
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
    elif replay is not None and not replay.is_file():
        raise InvalidData(f"--replay: {replay}: no such cassette file or directory")
    inner = load_runtime(args.runtime, RuntimeOptions(replay=replay, env=dict(os.environ)))
    # A 429 waits its retry-after and tries again; only what still fails is errored.
    return RetryingRuntime(inner, attempts=args.attempts, max_wait_s=30.0)


def _checked(args: argparse.Namespace) -> list[tuple[str, int]]:
    """The versions ``--promote`` pins, or a refusal of the flags together."""
    if args.merge is not None and len(args.contract) != 1:
        raise InvalidData("--merge combines the results of one contract")
    if args.merge is not None and args.promote is not None and "#" not in str(args.contract[0]):
        raise InvalidData("--merge --promote: name the version the shards ran (langfuse:NAME#N)")
    if args.retry_errors and args.resume is None:
        raise InvalidData("--retry-errors re-runs the errored cases of --resume FILE")
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
    for flag, path in (("--resume", args.resume), ("--baseline", args.baseline)):
        if several and path is not None and not path.is_dir():
            raise InvalidData(f"{flag}: with several contracts, a directory of results")
    if several and args.output is not None:
        try:
            args.output.mkdir(parents=True, exist_ok=True)
        except OSError as error:  # a file there, or no right to write
            kind = type(error).__name__
            raise InvalidData(f"--output: {args.output}: cannot be a directory ({kind})") from None

    def at(directory: Path | None, name: str, suffix: str = ".json") -> Path | None:
        return directory / f"{name}{suffix}" if directory is not None and several else directory

    found = []
    for index, path in enumerate(args.contract):
        contract = resolve_contract(path)
        output = at(args.output, contract.id, ".xml" if args.format == "junit" else ".json")
        junit = output is None or args.format == "junit"
        results = scratch / f"results-{index}.json" if junit or output is None else output
        resume, baseline = at(args.resume, contract.id), at(args.baseline, contract.id)
        found.append(_Files(contract, results, output, resume, baseline))
    return found


def _run(args: argparse.Namespace, plan: list[_Files], scratch: Path, err: TextIO) -> list[Summary]:
    cases: Path | list[EvalCaseSpec] | None = args.cases
    dataset: str | None = args.dataset
    if args.cases is not None and str(args.cases).startswith(LANGFUSE_CASES):
        name = str(args.cases).removeprefix(LANGFUSE_CASES)
        cases = fetch_dataset_cases(LangfuseConfig.from_env(os.environ), name)
        dataset = dataset or name  # the run lands on the dataset it read
    # Checked before any call (another contract's file is refused now, a baseline too) and
    # read as the run goes, from a copy when --output is the same file (opened for writing).
    resumes: list[Iterator[CaseResult] | None] = []
    for index, files in enumerate(plan):
        if files.baseline is not None:
            list(read_results(files.baseline, files.contract, "--baseline"))
        if (resume := files.resume) is not None:
            next(read_results(resume, files.contract), None)
            output = files.output
            if output is not None and os.path.exists(output) and resume.samefile(output):
                resume = Path(shutil.copyfile(resume, scratch / f"resume-{index}.json"))
        resumes.append(None if resume is None else read_results(resume, files.contract))
    runtime = _runtime(args, scratch)

    async def run_all() -> list[Summary]:
        judges = [judge_evaluator(path, runtime) for path in args.judge or ()]
        summaries = []
        for files, resume in zip(plan, resumes, strict=True):
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
                        keep="failures",
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
    where: dict[tuple[str, int], tuple[int, int]] = {}  # a case's file and line offset
    summary = Summary(contract.id, contract.version, "")
    for index, path in enumerate(paths):
        where.update(
            (case.key, (index, at)) for at, case in located_results(path, contract, "--merge")
        )
        found = read_summary(path) or {}
        summary.run_name = summary.run_name or found.get("run_name") or ""
        summary.run_url = summary.run_url or found.get("run_url")
    summary.run_name = summary.run_name or "merged"
    with _open(files.results) as stream, contextlib.ExitStack() as sources:
        opened = [sources.enter_context(path.open("rb")) for path in paths]
        writer = ResultsWriter(stream, contract.id, contract.version)
        for key in sorted(where):
            index, at = where[key]
            opened[index].seek(at)
            case = case_at(opened[index].readline().decode("utf-8"))
            if case is None:  # the file changed since it was read
                raise InvalidData(f"--merge: {paths[index]} changed while it was merged")
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
        err.write(f"templiqx: eval {summary.contract_id}: no case ran (an empty shard?)\n")
    if args.format != "table":
        err.write(
            f"eval {summary.contract_id}: {summary.passed}/{summary.total} passed, "
            f"{summary.failed} failed, {summary.errored} errored\n"
        )
        if summary.run_url:
            err.write(f"run: {summary.run_url}\n")
    out.flush()
