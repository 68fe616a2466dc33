"""Eval cases on a runtime's native async path: read, run, check and score, record (the results
file and a Langfuse experiment, which fails open as tracing does), report."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
import inspect
import json
import logging
import math
import os
import pkgutil
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import httpx
import orjson
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_core import (
    Contract,
    ExecutionRequest,
    InvalidData,
    IoFailure,
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

from .._config import LangfuseConfig
from .._prompts import MAX_PROMPT_BYTES, async_api, sync_api
from .._runtime import LangfuseTracedRuntime
from .._tracing import collect_traces, collect_usage, experiment_attributes
from ._report import CaseResult, EvalReport, ResultsWriter, Summary

if TYPE_CHECKING:
    from langfuse.api import AsyncLangfuseAPI, CreateScoreRequest

Evaluator = Callable[..., Any]


def resolve_contract(contract: Contract | str | Path) -> Contract:
    if isinstance(contract, Contract):
        return contract
    parsed, diagnostics = read_contract(contract)
    if parsed is None:
        first = diagnostics[0]
        raise InvalidData(f"{contract}: {first.code} {first.json_pointer or ''}: {first.message}")
    return parsed


def _load_evaluator(spec: str) -> Evaluator:
    """``module:function``, called as Langfuse calls evaluators (docs/evals.md)."""
    sys.path.insert(0, here := os.getcwd())  # as pytest imports a test module
    try:
        function: Evaluator = pkgutil.resolve_name(spec)
    except Exception as error:  # ImportError, AttributeError, or the module itself failing
        why = f"{type(error).__name__}: {error}"
        raise InvalidData(f"evaluator {spec!r}: cannot import it ({why})") from None
    finally:
        sys.path.remove(here)
    return function


def _score(value: Any, fallback: str) -> dict[str, Any]:
    """A score Langfuse's schema accepts (a boolean, a finite float, a string), or why not."""

    def get(key: str) -> Any:
        return value.get(key) if isinstance(value, dict) else getattr(value, key, None)

    name, score, comment = str(get("name") or fallback), get("value"), get("comment")
    if isinstance(score, int | float) and not isinstance(score, bool):
        score = math.inf if abs(score) > sys.float_info.max else float(score)  # past a float
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
    """A contract as an evaluator: given the arguments it declares, it answers {score, comment}."""
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
        if not isinstance(verdict := receipt.output, dict) or "score" not in verdict:
            raise InvalidData(f"judge {judge.id} answered without a score")
        return {"name": judge.id, "value": verdict["score"], "comment": verdict.get("comment")}

    evaluate.__name__ = judge.id
    return evaluate


logger = logging.getLogger("templiqx_langfuse")

_SCORE_BATCH = 50
_IN_FLIGHT = 4
_Target = Mapping[str, str | None]  # what a score is on: a trace and observation, or a run
#: Characters of a score's comment or text value sent to Langfuse (the results keep all).
SCORE_TEXT_LIMIT = 2000
#: Case metadata naming the Langfuse dataset item a case was read from.
DATASET_ITEM_KEY = "langfuse_dataset_item_id"


def stable_item_id(dataset: str, case_id: str) -> str:
    """The same dataset item for the same case on every run (and every shard)."""
    digest = hashlib.sha256(f"{dataset}\0{case_id}".encode()).hexdigest()
    return f"tqx-{digest[:32]}"


def item_id_of(dataset: str, case: EvalCaseSpec) -> str:  # the item it was read from, if any
    known = case.metadata.get(DATASET_ITEM_KEY)
    return known if isinstance(known, str) else stable_item_id(dataset, case.id)


def _case_of(item: Any) -> EvalCaseSpec:
    value = item.input
    metadata = dict(item.metadata) if isinstance(item.metadata, dict) else {}
    ours = isinstance(value, dict) and set(value) <= {"inputs", "context"}  # templiqx's upsert
    case_id = metadata.get("case_id")
    try:
        return EvalCaseSpec.model_validate(
            {
                "id": case_id if isinstance(case_id, str) and case_id else str(item.id),
                "inputs": value.get("inputs", {}) if ours else value,
                "context": value.get("context", {}) if ours else {},
                "expected_output": item.expected_output,
                "metadata": {**metadata, DATASET_ITEM_KEY: str(item.id)},
            }
        )
    except ValueError as error:  # pydantic's: a shape no case has
        raise InvalidData(f"Langfuse dataset item {item.id}: not a case ({error})") from None


def fetch_dataset_cases(config: LangfuseConfig, dataset: str) -> list[EvalCaseSpec]:
    """A dataset's active items as cases; an item's ``metadata.case_id`` names its case."""
    api, cases = sync_api(config, None), list[EvalCaseSpec]()
    page, pages, limit = 1, 1, 100
    while page <= pages:
        try:
            found = api.dataset_items.list(dataset_name=dataset, page=page, limit=limit)
        except Exception as error:  # the client's ApiError, httpx's, a bad body
            status = getattr(error, "status_code", None)
            if status == 200 and limit > 1:  # a page past MAX_PROMPT_BYTES: big items, one by one
                page = pages = (page - 1) * limit + 1
                limit = 1
                continue
            if status == 200:
                why = f"item {page} could not be read (not JSON, or past {MAX_PROMPT_BYTES} bytes)"
                raise InvalidData(f"Langfuse dataset {dataset!r}: {why}") from None
            why = f"HTTP {status}" if status else type(error).__name__
            # Langfuse refusing or unreachable is I/O; only an unreadable answer is data.
            kind = IoFailure if status or isinstance(error, httpx.HTTPError) else InvalidData
            raise kind(f"Langfuse dataset {dataset!r}: cannot read items ({why})") from None
        cases += [_case_of(item) for item in found.data if item.status == "ACTIVE"]
        pages, page = min(int(found.meta.total_pages), 10_000), page + 1
    return cases  # none active: the run says "no case ran" (exit 5)


def experiment_id_for(project_id: str | None, dataset_id: str | None, run_name: str) -> str:
    """The id the SDK derives (from JSON.stringify's bytes, as orjson's): shards share it."""
    payload = orjson.dumps(["langfuse-experiment-v1", project_id, dataset_id, run_name])
    return hashlib.sha256(payload).hexdigest()[:16]


def _clip(text: str) -> str:
    """Within ``SCORE_TEXT_LIMIT``: a batch stays far below the server's 1 MiB body limit."""
    return text if len(text) <= SCORE_TEXT_LIMIT else text[: SCORE_TEXT_LIMIT - 13] + "…[truncated]"


class LangfuseExperiment:
    """One eval run as a Langfuse experiment on dataset ``dataset``."""

    def __init__(
        self, config: LangfuseConfig, run_name: str, dataset: str, api: AsyncLangfuseAPI | None
    ) -> None:
        self.config, self.run_name, self.dataset = config, run_name, dataset
        self.dataset_id: str | None = None
        self.project_id = config.project_id
        self.experiment_id = experiment_id_for(None, None, run_name)
        self.failures, self._broken = 0, False
        self._api = api or async_api(config, None)
        self._scores: list[CreateScoreRequest] = []
        self._pending: set[asyncio.Future[Any]] = set()

    async def start(self) -> None:
        """The dataset before any case runs (its items are upserted as their cases run)."""
        api = self._api
        create = functools.partial(
            api.datasets.create,
            name=self.dataset,
            description=None,  # sent as null, as it always was
            metadata={"source": "templiqx eval"},
        )
        self.dataset_id = getattr(await self._call("dataset", create), "id", None)
        if self.project_id is None and not self._broken:  # the key's, so shards share ids
            found = await self._call("project lookup", api.projects.get)
            self.project_id = found.data[0].id if found is not None and found.data else None
        self.experiment_id = experiment_id_for(self.project_id, self.dataset_id, self.run_name)

    def attributes(self, case: EvalCaseSpec) -> dict[str, str]:
        """The generation's attributes the server builds the experiment of."""
        expected = case.expected_output
        attributes = {
            A.EXPERIMENT_ID: self.experiment_id,
            A.EXPERIMENT_NAME: self.run_name,
            A.EXPERIMENT_ITEM_ID: item_id_of(self.dataset, case),
            A.EXPERIMENT_ITEM_METADATA: json.dumps({"case_id": case.id, **case.metadata}),
            A.EXPERIMENT_METADATA: json.dumps({"experiment_run_name": self.run_name}),
            A.EXPERIMENT_DATASET_ID: self.dataset_id,
            A.EXPERIMENT_ITEM_EXPECTED_OUTPUT: None if expected is None else json.dumps(expected),
        }
        return {key: value for key, value in attributes.items() if value}

    async def record(self, case: EvalCaseSpec, result: CaseResult) -> None:
        """Upsert the case's item (once) and queue its scores; send a full batch."""
        if result.repeat == 0 and DATASET_ITEM_KEY not in case.metadata:
            upsert = functools.partial(
                self._api.dataset_items.create,
                dataset_name=self.dataset,
                id=item_id_of(self.dataset, case),
                input={"inputs": case.inputs, "context": case.context},
                expected_output=case.expected_output,
                metadata={"case_id": case.id, **case.metadata},
            )
            await self._spawn("dataset item", upsert)
        if result.trace_id is None:
            return
        target = {"trace_id": result.trace_id, "observation_id": result.observation_id}
        checks = [check for check in result.assertions if not check.get("evaluator")]
        for index, check in enumerate(checks):
            name, comment = f"check {index}: {check['name']}", check.get("detail") or None
            self._score(name, bool(check["passed"]), target, comment)
        self._score("passed", result.passed, target)
        for score in result.scores:
            self._score(str(score["name"]), score["value"], target, score.get("comment"))
        if len(self._scores) >= _SCORE_BATCH:
            await self._send_scores()

    def _score(
        self, name: str, value: bool | float | str, target: _Target, comment: str | None = None
    ) -> None:
        """Its id derived from target and name: sent again, it updates, not adds."""
        from langfuse.api import CreateScoreRequest

        given = {  # the client sends a None as null, which the server refuses for some
            "comment": _clip(comment) if comment else None,
            "environment": self.config.environment,
            **target,
        }
        self._scores.append(
            CreateScoreRequest(
                id=hashlib.sha256(json.dumps([*target.values(), name]).encode()).hexdigest()[:32],
                name=name,
                value=_clip(value) if isinstance(value, str) else float(value),
                data_type={bool: "BOOLEAN", str: "CATEGORICAL"}.get(type(value), "NUMERIC"),
                **{key: ref for key, ref in given.items() if ref is not None},
            )
        )

    async def finish(self, summary: Summary) -> str | None:
        """Send what is queued and the run-level scores; the run's URL if known."""
        run = {"dataset_run_id": self.experiment_id}
        self._score("pass_rate", summary.pass_rate, run, f"{summary.passed}/{summary.total} passed")
        for name, mean in summary.score_means().items():
            self._score(f"mean_{name}", mean, run)
        await self._send_scores()
        await asyncio.gather(*self._pending)  # each call catches its own failure
        if self.project_id is None:
            return None
        base = f"{self.config.base_url.rstrip('/')}/project/{self.project_id}"
        return f"{base}/experiments/results?baseline={self.experiment_id}"  # hex: no quoting

    async def aclose(self) -> None:
        for task in self._pending:
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)

    async def _send_scores(self) -> None:
        while self._scores:
            batch, self._scores = self._scores[:_SCORE_BATCH], self._scores[_SCORE_BATCH:]
            await self._spawn("scores", functools.partial(self._api.scores.create, request=batch))

    async def _spawn(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        while len(self._pending) >= _IN_FLIGHT:
            await asyncio.wait(set(self._pending), return_when=asyncio.FIRST_COMPLETED)
        if not self._broken:  # a call failed past the client's retries: send nothing more
            self._pending.add(task := asyncio.ensure_future(self._call(what, call)))
            task.add_done_callback(self._pending.discard)

    async def _call(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        answer, why = None, None
        try:
            answer = await call()
        except Exception as error:  # the client's ApiError, httpx's, a body it cannot parse
            status = getattr(error, "status_code", None)
            self._broken = True  # so a Langfuse down costs one timeout, not one per case
            why = f"HTTP {status}" if status else type(error).__name__
        if rejected := getattr(answer, "rejected", 0):  # a 207: some scores refused
            why = f"{rejected} refused"
        if why is not None:
            self.failures += 1
            if self.failures == 1:  # one warning; the eval's results are unaffected
                logger.warning("Langfuse experiment: sending a %s failed (%s)", what, why)
        return answer


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
    """Run every case (``repeat`` times) on ``runtime``; with an ``output`` file the report keeps
    only the failed ones. A traced runtime lands it as a Langfuse experiment on ``dataset``."""
    if concurrency < 1 or repeat < 1:
        raise InvalidData("concurrency and repeat must be at least 1")
    parsed = resolve_contract(contract)
    if cases is None:
        evals = (case.model_dump(by_alias=True, mode="json") for case in parsed.evals)
        cases = [EvalCaseSpec.model_validate(case) for case in evals]
    elif not isinstance(cases, Path):
        cases = list(cases)

    def in_shard(case_id: str) -> bool:  # shard (I, N), 1-based, by a hash: a case keeps it
        digest = hashlib.sha256(case_id.encode()).digest()[:8]
        return shard is None or int.from_bytes(digest, "big") % shard[1] == shard[0] - 1

    def source() -> Iterator[EvalCaseSpec]:
        every = iter_cases(cases) if isinstance(cases, Path) else cases
        return (case for case in every if in_shard(case.id))

    # Every case valid before any call; ids unique: results, resumption and scores key on them.
    ids = Counter(case.id for case in source())
    if twice := next((key for key, count in ids.items() if count > 1), None):
        raise InvalidData(f"case id {twice!r} appears twice")
    total = sum(ids.values())
    loaded = [_load_evaluator(e) if isinstance(e, str) else e for e in evaluators]
    name = run_name or f"{parsed.id} v{parsed.version} {datetime.now(UTC):%Y-%m-%dT%H:%M:%SZ}"
    targets = list(capabilities) if capabilities is not None else parsed.declared_capabilities
    summary = Summary(parsed.id, parsed.version, name)
    kept: list[CaseResult] = []
    writer = None if output is None else ResultsWriter(output, parsed.id, parsed.version)
    traced: Any = runtime  # the traced runtime it is or wraps (retrying, replaying, ...), if any
    while traced is not None and not isinstance(traced, LangfuseTracedRuntime):
        traced = getattr(traced, "inner", None)
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
        api = None if langfuse is None else langfuse.async_api  # a host's own client's
        lane = LangfuseExperiment(traced.langfuse_config, name, dataset or parsed.id, api)

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
            seen = Observed(
                receipt.output, receipt.output_schema_valid, latency, usage.get("total")
            )
            found = check_case(case.assert_, case.expected_output, seen)
            scores, evaluated = await _evaluate(loaded, case, receipt.output)
            checks = [*map(dataclasses.asdict, found), *evaluated]
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
            progress.write("\n")  # a line ending flushes a terminal's stream
        if lane is not None:
            await lane.aclose()  # gathers its cancelled calls, their exceptions returned
        if writer is not None:
            writer.close(summary)
    return EvalReport(summary, kept)


def run_eval(contract: Contract | str | Path, **options: Any) -> EvalReport:
    """``arun_eval`` on its own event loop: inside a running one, ``await arun_eval(...)``."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(arun_eval(contract, **options))
    raise Unsupported("run_eval inside a running event loop (a notebook): `await arun_eval(...)`")


def assert_eval_passes(
    contract: Contract | str | Path, *, min_pass_rate: float | None = None, **options: Any
) -> EvalReport:
    """``run_eval(contract, runtime=..., ...)`` as one assertion naming each failing case."""
    report = run_eval(contract, **options)
    summary = report.summary
    if summary.gate(min_pass_rate):
        return report
    wanted = "every case" if min_pass_rate is None else f"{min_pass_rate:.1%}"
    head = f"eval {summary.contract_id}: {summary.passed}/{summary.total} passed (wanted {wanted})"
    failed = (
        f"  {case.id}#{case.repeat}: {case.why()}" for case in report.cases if not case.passed
    )
    raise AssertionError("\n".join([head, *failed]))
