"""Eval cases on a runtime's native async path, one way: read the cases, run each
(``concurrency`` workers pulling from one iterator), check and score, record, report."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import inspect
import math
import os
import pkgutil
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

from templiqx_core import (
    Contract,
    ExecutionRequest,
    InvalidData,
    PortError,
    RenderRequest,
    RepairingRuntime,
    RuntimeAdapter,
    Unsupported,
    collect_attempts,
    compile_contract,
    read_contract,
)
from templiqx_core.evals import EvalCaseSpec, Observed, check_case, iter_cases

from .._runtime import LangfuseTracedRuntime
from .._tracing import collect_traces, collect_usage, experiment_attributes
from ._experiment import LangfuseExperiment
from ._report import CaseResult, EvalReport, ResultsWriter, Summary

Evaluator = Callable[..., Any]


def resolve_contract(contract: Contract | str | Path) -> Contract:
    if isinstance(contract, Contract):
        return contract
    parsed, diagnostics = read_contract(contract)
    if parsed is None:
        first = diagnostics[0]
        raise InvalidData(f"{contract}: {first.code} {first.json_pointer or ''}: {first.message}")
    return parsed


def _in_shard(case_id: str, shard: tuple[int, int]) -> bool:
    """``shard`` is ``(I, N)``, 1-based; by a hash of the id, so a case keeps its shard."""
    index, count = shard
    return int.from_bytes(hashlib.sha256(case_id.encode()).digest()[:8], "big") % count == index - 1


def _load_evaluator(spec: str) -> Evaluator:
    """``module:function`` (of the working directory too), called as Langfuse calls evaluators:
    ``(input=, output=, expected_output=, metadata=)`` -> ``{name, value, comment}`` (or a list)."""
    if not all(spec.partition(":")[::2]):
        raise InvalidData(f"evaluator {spec!r} is not module:function")
    here = os.getcwd()
    added = here not in sys.path and "" not in sys.path
    if added:
        sys.path.insert(0, here)
    try:
        function: Evaluator = pkgutil.resolve_name(spec)
    except Exception as error:  # ImportError, AttributeError, or the module itself failing
        why = f"{type(error).__name__}: {error}"
        raise InvalidData(f"evaluator {spec!r}: cannot import it ({why})") from None
    finally:
        if added:
            sys.path.remove(here)
    if not callable(function):
        raise InvalidData(f"evaluator {spec!r} is not a function")
    return function


def _score(value: Any, fallback: str) -> dict[str, Any]:
    """A score Langfuse's schema accepts (a boolean, a finite float, a string), or why not."""

    def get(key: str) -> Any:
        return value.get(key) if isinstance(value, dict) else getattr(value, key, None)

    name, score, comment = str(get("name") or fallback), get("value"), get("comment")
    if isinstance(score, int | float) and not isinstance(score, bool):
        try:
            score = float(score)
        except OverflowError:
            score = math.inf
        if not math.isfinite(score):
            raise InvalidData(f"evaluator {name} returned {score}: not a finite number")
    elif not isinstance(score, bool | str):
        kind = type(score).__name__
        raise InvalidData(f"evaluator {name} returned a {kind}: not a number, string or boolean")
    if not name.strip():
        raise InvalidData(f"evaluator {fallback} returned an empty score name")
    return {"name": name, "value": score, "comment": None if comment is None else str(comment)}


async def _evaluate(
    evaluators: Sequence[Evaluator], case: EvalCaseSpec, output: Any
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Scores and their checks (a boolean score of false fails the case)."""
    scores: list[dict[str, Any]] = []
    checks: list[dict[str, Any]] = []
    for evaluator in evaluators:
        label = getattr(evaluator, "__name__", "evaluator")
        try:
            found = evaluator(
                input={"inputs": case.inputs, "context": case.context},
                output=output,
                expected_output=case.expected_output,
                metadata=case.metadata,
            )
            if inspect.isawaitable(found):
                found = await found
            items = found if isinstance(found, list | tuple) else [found]
            found = [_score(item, label) for item in items]
        except Exception as error:  # a user's evaluator: its failure is the case's
            why = f"{error.code}: {error}" if isinstance(error, PortError) else None
            why = why or f"raised {type(error).__name__}"
            checks.append({"name": label, "passed": False, "detail": why, "evaluator": True})
            continue
        scores += found
        for score in found:
            if isinstance(passed := score["value"], bool):
                detail = "" if passed else score["comment"] or "scored false"
                checks.append(
                    {"name": score["name"], "passed": passed, "detail": detail, "evaluator": True}
                )
    return scores, checks


def judge_evaluator(contract: Contract | str | Path, runtime: RuntimeAdapter) -> Evaluator:
    """A contract as an evaluator: the arguments it declares as inputs, answering ``{score,
    comment}`` (a boolean score is a check, a number a score), named by its contract id."""
    judge = resolve_contract(contract)

    async def evaluate(*, input: Any, output: Any, expected_output: Any, metadata: Any) -> Any:
        offered = dict(
            input=input, output=output, expected_output=expected_output, metadata=metadata
        )
        values = {k: v for k, v in offered.items() if k in judge.inputs and v is not None}
        compiled = compile_contract(judge, RenderRequest(inputs=values))
        if compiled.interaction is None:
            first = compiled.diagnostics[0]
            raise InvalidData(f"judge {judge.id}: {first.code} {first.message}")
        receipt = await runtime.aexecute(ExecutionRequest(interaction=compiled.interaction))
        verdict = receipt.output
        if not isinstance(verdict, dict) or "score" not in verdict:
            raise InvalidData(f"judge {judge.id} answered without a score")
        return {"name": judge.id, "value": verdict["score"], "comment": verdict.get("comment")}

    evaluate.__name__ = judge.id
    return evaluate


def _traced(runtime: RuntimeAdapter) -> LangfuseTracedRuntime | None:
    """The traced runtime ``runtime`` is or wraps (retrying, replaying, ...), if any."""
    inner: Any = runtime
    for _ in range(16):  # a bounded walk down the wrappers
        if isinstance(inner, LangfuseTracedRuntime):
            return inner
        inner = getattr(inner, "inner", None)
    return None


async def arun_eval(
    contract: Contract | str | Path,
    *,
    runtime: RuntimeAdapter,
    cases: Iterable[EvalCaseSpec] | Path | None = None,
    capabilities: Sequence[str] | None = None,
    concurrency: int = 10,
    repeat: int = 1,
    shard: tuple[int, int] | None = None,
    run_name: str | None = None,
    evaluators: Sequence[Evaluator | str] = (),
    output: IO[str] | None = None,
    resume: Iterable[CaseResult] = (),
    retry_errors: bool = False,
    progress: IO[str] | None = None,
    experiment: bool = True,
    dataset: str | None = None,
    langfuse: Any = None,
    repair: int | None = None,
) -> EvalReport:
    """Run every case (``repeat`` times) of ``contract`` on ``runtime`` and report.

    A ``cases`` path is re-read per pass; with an ``output`` file the report keeps only the
    failed cases (memory stays flat). A traced runtime lands the run as a Langfuse experiment
    on ``dataset`` (default: contract id).
    """
    if concurrency < 1 or repeat < 1:
        raise InvalidData("concurrency and repeat must be at least 1")
    parsed = resolve_contract(contract)
    if cases is None:
        evals = (case.model_dump(by_alias=True, mode="json") for case in parsed.evals)
        cases = [EvalCaseSpec.model_validate(case) for case in evals]
    elif not isinstance(cases, Path):
        cases = list(cases)

    def source() -> Iterator[EvalCaseSpec]:
        every = iter_cases(cases) if isinstance(cases, Path) else cases
        return (case for case in every if shard is None or _in_shard(case.id, shard))

    # Every case valid before any call; ids unique: results, resumption and scores key on them.
    ids = Counter(case.id for case in source())
    if twice := next((key for key, count in ids.items() if count > 1), None):
        raise InvalidData(f"case id {twice!r} appears twice")
    total = sum(ids.values())
    name = run_name or f"{parsed.id} v{parsed.version} {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
    loaded = [_load_evaluator(e) if isinstance(e, str) else e for e in evaluators]
    targets = list(capabilities) if capabilities is not None else parsed.declared_capabilities
    summary = Summary(parsed.id, parsed.version, name)
    kept: list[CaseResult] = []
    writer = None if output is None else ResultsWriter(output, parsed.id, parsed.version)
    traced = _traced(runtime)
    redactor = getattr(traced, "redactor", None)
    repairing = runtime if repair is None else RepairingRuntime(runtime, attempts=repair)

    def accept(result: CaseResult) -> CaseResult:
        if redactor:  # free of the runtime's secrets before any file, report or score
            result = CaseResult.from_json(redactor.value(result.to_json()))
        if writer is not None:  # first: the summary counts only what the file holds
            writer.write(result)
        summary.add(result)
        if output is None or not result.passed:
            kept.append(result if output is None else dataclasses.replace(result, output=None))
        return result

    finished: set[tuple[str, int]] = set()
    for result in resume:
        if not (retry_errors and result.errored) and result.key not in finished:
            finished.add(result.key)
            accept(result)

    lane = None
    if experiment and traced and traced.tracing.pipeline and traced.langfuse_config.enabled:
        api = None if langfuse is None else langfuse.async_api
        lane = LangfuseExperiment(
            traced.langfuse_config, run_name=name, dataset=dataset or parsed.id, api=api
        )

    async def one(case: EvalCaseSpec, k: int) -> CaseResult:
        render = RenderRequest(inputs=case.inputs, context=case.context)
        compiled = compile_contract(parsed, render, targets)
        if compiled.interaction is None:
            first = compiled.diagnostics[0]
            failed = {"code": first.code, "detail": f"{first.json_pointer or ''} {first.message}"}
            tried = None if repair is None else 0  # no call made
            return CaseResult(case.id, k, False, True, error=failed, attempts=tried)
        request = ExecutionRequest(
            interaction=compiled.interaction, fixture_output=case.fake_output
        )
        receipt, error, started = None, None, time.perf_counter()
        with (
            experiment_attributes(lane.attributes(case) if lane else None),
            collect_traces() as refs,
            collect_usage() as used,
            collect_attempts() as counted,
        ):
            try:
                receipt = await repairing.aexecute(request)
            except PortError as failure:
                error = {"code": failure.code, "detail": str(failure)}
        latency = (time.perf_counter() - started) * 1000
        usage = used[-1] if used and receipt is not None else {}
        checks: list[dict[str, Any]] = []
        scores: list[dict[str, Any]] = []
        if receipt is not None:
            observed = Observed(
                receipt.output, receipt.output_schema_valid, latency, usage.get("total")
            )
            checks = [
                dataclasses.asdict(r)
                for r in check_case(case.assert_, case.expected_output, observed)
            ]
            scores, evaluated = await _evaluate(loaded, case, receipt.output)
            checks += evaluated
        return CaseResult(
            case.id,
            k,
            passed=receipt is not None and all(check["passed"] for check in checks),
            errored=receipt is None,
            assertions=tuple(checks),
            scores=tuple(scores),
            error=error,
            output=None if receipt is None else receipt.output,
            trace_id=refs[-1].trace_id if refs else None,
            observation_id=refs[-1].observation_id if refs else None,
            latency_ms=round(latency, 3),
            usage=usage,
            output_fingerprint=None if receipt is None else receipt.output_fingerprint,
            # One try (``repair=1``) is the runtime as it is, which reports nothing.
            attempts=None if repair is None else counted[-1] if counted else 1,
        )

    todo = total * repeat - len(finished)
    goal = summary.total + todo  # the resumed cases count as done
    started, drawn = time.perf_counter(), 0.0

    def draw() -> None:  # one stderr line, redrawn at most ten times a second
        nonlocal drawn
        now = time.perf_counter()
        if progress is not None and (now - drawn >= 0.1 or summary.total == goal):
            drawn, bar = now, ("#" * (24 * summary.total // max(goal, 1))).ljust(24, ".")
            done = f"{summary.total}/{goal} ✗ {summary.failed} errored {summary.errored}"
            progress.write(f"\reval {parsed.id} [{bar}] {done} {now - started:.1f}s")
            progress.flush()

    jobs = ((case, k) for k in range(repeat) for case in source() if (case.id, k) not in finished)

    async def worker() -> None:
        for case, k in jobs:
            result = accept(await one(case, k))
            draw()
            if lane is not None:
                await lane.record(case, result)

    try:
        if lane is not None:
            await lane.start()
        async with asyncio.TaskGroup() as group:
            for _ in range(min(concurrency, max(todo, 1))):  # no idle worker for a short run
                group.create_task(worker())
        if lane is not None:
            summary.run_url = await lane.finish(summary)
    except BaseException:
        summary.interrupted = True
        raise
    finally:
        if progress is not None and drawn:
            progress.write("\n")
            progress.flush()
        if lane is not None:
            with contextlib.suppress(Exception):
                await lane.aclose()
        if writer is not None:
            writer.close(summary)
    return EvalReport(summary, kept)


def run_eval(contract: Contract | str | Path, **options: Any) -> EvalReport:
    """``arun_eval`` on its own event loop: inside a running one, ``await arun_eval(...)``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_eval(contract, **options))
    raise Unsupported(
        "run_eval cannot run inside a running event loop (a notebook, an async test): "
        "use `await arun_eval(...)` there"
    )


def assert_eval_passes(
    contract: Contract | str | Path,
    *,
    runtime: RuntimeAdapter,
    min_pass_rate: float | None = None,
    **options: Any,
) -> EvalReport:
    """``run_eval`` as one assertion, naming every failing case and why."""
    report = run_eval(contract, runtime=runtime, **options)
    if report.summary.gate(min_pass_rate):
        return report
    summary = report.summary
    wanted = "every case" if min_pass_rate is None else f"pass rate >= {min_pass_rate:.1%}"
    lines = [
        f"eval {summary.contract_id}: {summary.passed}/{summary.total} passed "
        f"(pass rate {summary.pass_rate:.1%}; wanted {wanted})",
        *(f"  {case.id}#{case.repeat}: {case.why()}" for case in report.cases if not case.passed),
    ]
    raise AssertionError("\n".join(lines))
