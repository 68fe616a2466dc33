"""An eval run as a Langfuse experiment: dataset, items and scores upserted under stable ids,
so a rerun or a shard adds nothing twice; like tracing it fails open (one warning)."""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import random
import urllib.parse
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any

import httpx
import orjson
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_core import InvalidData, IoFailure
from templiqx_core.evals import EvalCaseSpec

from .._config import LangfuseConfig
from .._prompts import MAX_PROMPT_BYTES, async_api, sync_api
from ._report import CaseResult, Summary

if TYPE_CHECKING:
    from langfuse.api import AsyncLangfuseAPI, CreateScoreRequest

logger = logging.getLogger("templiqx_langfuse")

_SCORE_BATCH = 50
_IN_FLIGHT = 4
_PAGE = 100
#: Characters of a score's comment or text value sent to Langfuse (the results keep all).
SCORE_TEXT_LIMIT = 2000
#: Case metadata naming the Langfuse dataset item a case was read from.
DATASET_ITEM_KEY = "langfuse_dataset_item_id"


def stable_item_id(dataset: str, case_id: str) -> str:
    """The same dataset item for the same case on every run (and every shard)."""
    digest = hashlib.sha256(f"{dataset}\0{case_id}".encode()).hexdigest()
    return f"tqx-{digest[:32]}"


def item_id_of(dataset: str, case: EvalCaseSpec) -> str:
    """The item a case is: the one it was read from, or its stable id in ``dataset``."""
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
    if not config.public_key or not config.secret_key:
        raise InvalidData("cases from a Langfuse dataset need LANGFUSE_PUBLIC_KEY/SECRET_KEY")
    api, cases = sync_api(config, None), list[EvalCaseSpec]()
    page, pages, limit = 1, 1, _PAGE
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
                raise InvalidData(
                    f"Langfuse dataset {dataset!r}: item {page} could not be read (not JSON, "
                    f"or past the {MAX_PROMPT_BYTES} bytes an answer may be)"
                ) from None
            why = f"HTTP {status}" if status else type(error).__name__
            # Langfuse refusing or unreachable is I/O; only an unreadable answer is data.
            kind = IoFailure if status or isinstance(error, httpx.HTTPError) else InvalidData
            raise kind(f"Langfuse dataset {dataset!r}: cannot read items ({why})") from None
        cases += [_case_of(item) for item in found.data if item.status == "ACTIVE"]
        pages, page = min(int(found.meta.total_pages), 10_000), page + 1
    if not cases:
        raise InvalidData(f"Langfuse dataset {dataset!r} has no active items")
    return cases


def experiment_id_for(project_id: str | None, dataset_id: str | None, run_name: str) -> str:
    """The id the SDK derives, so a run's shards share it; random without project or dataset."""
    if project_id is None or dataset_id is None:
        return f"{random.getrandbits(64):016x}"
    # JSON.stringify's bytes: compact, UTF-8 unescaped (orjson's too).
    payload = orjson.dumps(["langfuse-experiment-v1", project_id, dataset_id, run_name])
    return hashlib.sha256(payload).hexdigest()[:16]


def _clip(text: str) -> str:
    """Within ``SCORE_TEXT_LIMIT``: a batch stays far below the server's 1 MiB body limit."""
    return text if len(text) <= SCORE_TEXT_LIMIT else text[: SCORE_TEXT_LIMIT - 13] + "…[truncated]"


class LangfuseExperiment:
    """One eval run as a Langfuse experiment on dataset ``dataset``."""

    def __init__(
        self,
        config: LangfuseConfig,
        *,
        run_name: str,
        dataset: str,
        api: AsyncLangfuseAPI | None = None,
    ) -> None:
        self.config, self.run_name, self.dataset = config, run_name, dataset
        self.dataset_id: str | None = None
        self.project_id = config.project_id
        self.experiment_id = experiment_id_for(None, None, run_name)
        self.failures = 0
        self._broken = False
        self._api = api
        self._scores: list[CreateScoreRequest] = []
        self._pending: set[asyncio.Future[Any]] = set()

    async def start(self) -> None:
        """The dataset before any case runs (its items are upserted as their cases run)."""
        api = self._api = self._api or async_api(self.config, None)
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
        """Upsert the case's item (once; not one read from the dataset) and queue its scores
        (each check, ``passed``, the evaluators'); send a full batch."""
        if result.repeat == 0 and DATASET_ITEM_KEY not in case.metadata:
            assert self._api is not None
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
        self,
        name: str,
        value: bool | float | str,
        target: Mapping[str, str | None],
        comment: str | None = None,
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
        while self._pending:
            await asyncio.wait(set(self._pending))
            self._pending = {task for task in self._pending if not task.done()}
        if self.project_id is None:
            return None
        baseline = urllib.parse.quote(self.experiment_id, safe="")
        base = f"{self.config.base_url.rstrip('/')}/project/{self.project_id}"
        return f"{base}/experiments/results?baseline={baseline}"

    async def aclose(self) -> None:
        for task in self._pending:
            task.cancel()
        await asyncio.gather(*self._pending, return_exceptions=True)

    async def _send_scores(self) -> None:
        assert self._api is not None
        while self._scores:
            batch, self._scores = self._scores[:_SCORE_BATCH], self._scores[_SCORE_BATCH:]
            await self._spawn("scores", functools.partial(self._api.scores.create, request=batch))

    async def _spawn(self, what: str, call: Callable[[], Awaitable[Any]]) -> None:
        while len(self._pending) >= _IN_FLIGHT:
            await asyncio.wait(set(self._pending), return_when=asyncio.FIRST_COMPLETED)
        if not self._broken:  # a call failed past the client's retries: send nothing more
            self._track(asyncio.ensure_future(self._call(what, call)))

    def _track(self, task: asyncio.Future[Any]) -> None:
        self._pending.add(task)
        task.add_done_callback(self._pending.discard)

    async def _call(self, what: str, call: Callable[[], Awaitable[Any]]) -> Any:
        try:
            answer = await call()
        except Exception as error:  # the client's ApiError, httpx's, a body it cannot parse
            status = getattr(error, "status_code", None)
            self._broken = True  # so a Langfuse down costs one timeout, not one per case
            self._failed(what, f"HTTP {status}" if status else type(error).__name__)
            return None
        if rejected := getattr(answer, "rejected", 0):  # a 207: some scores refused
            self._failed(what, f"{rejected} refused")
        return answer

    def _failed(self, what: str, why: str) -> None:
        self.failures += 1
        if self.failures == 1:
            why = f"sending a {what} failed ({why})"
            logger.warning("Langfuse experiment: %s; the eval's results are unaffected", why)
