"""An eval run landing in Langfuse as an experiment, through the public API (httpx).

What the Langfuse server reads (``OtelIngestionProcessor.extractExperimentFields``): each
case's generation carries ``langfuse.experiment.*`` attributes — experiment id, name (the
run name), description, dataset id, item id, expected output, metadata — and names
itself the item's root observation. The dataset is upserted (``POST
/api/public/v2/datasets``) and every case becomes an item with a stable id (``POST
/api/public/dataset-items``); each finished case is linked to the run (``POST
/api/public/dataset-run-items``, whose response names the run on every server version),
its evaluator scores go to its trace and generation, and the run-level scores (pass
rate, mean per evaluator) to the dataset run, through ``POST /api/public/ingestion``.

Like tracing, it fails open: an unreachable or refusing Langfuse is one warning, and the
eval's results do not change. Nothing here blocks a case: requests leave from a queue.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import random
import urllib.parse
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

import httpx
from langfuse import LangfuseOtelSpanAttributes as A

from templiqx_core import InvalidData
from templiqx_core._eval_cases import EvalCaseSpec

from .._config import LangfuseConfig
from ._report import CaseResult, Summary

__all__ = [
    "DATASET_ITEM_KEY",
    "LangfuseExperiment",
    "fetch_dataset_cases",
    "score_body",
    "stable_item_id",
]

logger = logging.getLogger("templiqx_langfuse")

DATASETS_PATH = "/api/public/v2/datasets"
DATASET_ITEMS_PATH = "/api/public/dataset-items"
DATASET_RUN_ITEMS_PATH = "/api/public/dataset-run-items"
INGESTION_PATH = "/api/public/ingestion"
_SCORE_BATCH = 50
_SENDERS = 4
_PAGE = 100
#: Case metadata naming the Langfuse dataset item a case was read from.
DATASET_ITEM_KEY = "langfuse_dataset_item_id"


def stable_item_id(dataset: str, case_id: str) -> str:
    """The same dataset item for the same case on every run (and every shard)."""
    digest = hashlib.sha256(f"{dataset}\0{case_id}".encode()).hexdigest()
    return f"tqx-{digest[:32]}"


def item_id_of(dataset: str | None, case: EvalCaseSpec) -> str:
    """The item a case is: the one it was read from, or its stable id in ``dataset`` (a
    local run's cases keep a stable id of their own)."""
    known = case.metadata.get(DATASET_ITEM_KEY)
    return known if isinstance(known, str) else stable_item_id(dataset or _LOCAL, case.id)


def _case_of(item: Mapping[str, Any]) -> EvalCaseSpec:
    value, metadata = item.get("input"), item.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    if not isinstance(value, dict):
        raise InvalidData(f"Langfuse dataset item {item.get('id')}: input is not an object")
    if set(value) <= {"inputs", "context"}:  # the shape templiqx upserts
        inputs, context = value.get("inputs", {}), value.get("context", {})
    else:
        inputs, context = value, {}
    case_id = metadata.get("case_id")
    return EvalCaseSpec.model_validate(
        {
            "id": case_id if isinstance(case_id, str) and case_id else str(item["id"]),
            "inputs": inputs,
            "context": context,
            "expected_output": item.get("expectedOutput"),
            "metadata": {**metadata, DATASET_ITEM_KEY: str(item["id"])},
        }
    )


def fetch_dataset_cases(
    config: LangfuseConfig, dataset: str, *, transport: httpx.BaseTransport | None = None
) -> list[EvalCaseSpec]:
    """The active items of a Langfuse dataset as cases (``GET /api/public/dataset-items``,
    page by page): ``input`` ``{inputs, context}`` (or the inputs themselves),
    ``expectedOutput``, ``metadata`` (``case_id`` names the case, else the item id)."""
    if not config.public_key or not config.secret_key:
        raise InvalidData("cases from a Langfuse dataset need LANGFUSE_PUBLIC_KEY/SECRET_KEY")
    cases: list[EvalCaseSpec] = []
    with httpx.Client(
        base_url=config.base_url,
        auth=config.keys(),
        timeout=30.0,
        transport=transport,
    ) as client:
        page, pages = 1, 1
        while page <= pages:
            query: dict[str, str | int] = {"datasetName": dataset, "page": page, "limit": _PAGE}
            try:
                response = client.get(DATASET_ITEMS_PATH, params=query)
                data = response.json() if response.status_code == 200 else None
            except (httpx.HTTPError, ValueError) as error:
                raise InvalidData(
                    f"Langfuse dataset {dataset!r}: cannot read items ({type(error).__name__})"
                ) from None
            if not isinstance(data, dict) or not isinstance(data.get("data"), list):
                status = response.status_code
                raise InvalidData(f"Langfuse dataset {dataset!r}: HTTP {status} reading items")
            cases += [_case_of(i) for i in data["data"] if i.get("status", "ACTIVE") == "ACTIVE"]
            pages = int(data.get("meta", {}).get("totalPages", 1))
            page += 1
    if not cases:
        raise InvalidData(f"Langfuse dataset {dataset!r} has no active items")
    return cases


#: What stands for the dataset in a local run's experiment id (its cases are no items).
_LOCAL = "local"


def experiment_id_for(project_id: str | None, dataset_id: str | None, run_name: str) -> str:
    """The server's stable experiment id for a dataset run (as Langfuse's SDK derives
    it), so the shards of one run share it; a local run (no dataset) derives it the same
    way from its run name. Random without a project (nothing to keep it stable in)."""
    if project_id is None:
        return f"{random.getrandbits(64):016x}"
    payload = json.dumps(
        ["langfuse-experiment-v1", project_id, dataset_id or _LOCAL, run_name],
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(payload.encode("utf-8")).hexdigest()[:16]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _event_id() -> str:
    return f"{random.getrandbits(128):032x}"


def score_body(
    name: str,
    value: Any,
    *,
    comment: str | None = None,
    trace_id: str | None = None,
    observation_id: str | None = None,
    dataset_run_id: str | None = None,
    environment: str | None = None,
) -> dict[str, Any]:
    """A ``ScoreBody``: BOOLEAN for a bool (0/1), NUMERIC for a number, CATEGORICAL for
    text; attached to a trace (and observation) or to a dataset run, never both."""
    body: dict[str, Any] = {"id": _event_id(), "name": name, "source": "API"}
    if isinstance(value, bool):
        body.update(value=1 if value else 0, dataType="BOOLEAN")
    elif isinstance(value, int | float):
        body.update(value=float(value), dataType="NUMERIC")
    else:
        body.update(value=str(value), dataType="CATEGORICAL")
    if dataset_run_id is not None:
        body["datasetRunId"] = dataset_run_id
    else:
        body["traceId"] = trace_id
        if observation_id is not None:
            body["observationId"] = observation_id
    if comment:
        body["comment"] = comment
    if environment is not None:
        body["environment"] = environment
    return body


class LangfuseExperiment:
    """One eval run as a Langfuse experiment: on dataset ``dataset`` (upserted, each case
    an item, each finished case linked to the dataset run, run-level scores on it), or,
    without one, as an experiment of local items (the server's direct-OTel way: the
    generations carry the experiment and item attributes, scores go on their traces)."""

    def __init__(
        self,
        config: LangfuseConfig,
        *,
        run_name: str,
        dataset: str | None,
        description: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.config = config
        self.run_name = run_name
        self.dataset = dataset
        self.description = description
        self.metadata = dict(metadata or {})
        self.dataset_id: str | None = None
        self.experiment_id = experiment_id_for(None, None, run_name)
        self.dataset_run_id: str | None = None
        self.failures = 0
        self._transport = transport
        self._timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] | None = None
        self._senders: list[asyncio.Task[None]] = []
        self._scores: list[dict[str, Any]] = []
        self._items: asyncio.Task[None] | None = None

    # -- lifecycle ----------------------------------------------------------------------

    async def start(self, cases: Iterable[EvalCaseSpec]) -> None:
        """Upsert the dataset (before any case runs), then one item per case."""
        self._client = httpx.AsyncClient(
            base_url=self.config.base_url,
            auth=self.config.keys(),
            timeout=self._timeout_s,
            transport=self._transport,
        )
        self._queue = asyncio.Queue(maxsize=1000)
        self._senders = [asyncio.create_task(self._send_loop()) for _ in range(_SENDERS)]
        if self.dataset is None:
            self.experiment_id = experiment_id_for(self.config.project_id, None, self.run_name)
            return
        body: dict[str, Any] = {"name": self.dataset, "metadata": {"source": "templiqx eval"}}
        if self.description:
            body["description"] = self.description
        created = await self._post(DATASETS_PATH, body)
        if isinstance(created, dict) and isinstance(created.get("id"), str):
            self.dataset_id = created["id"]
        self.experiment_id = experiment_id_for(
            self.config.project_id, self.dataset_id, self.run_name
        )
        # Items go up while the cases run (a run item waits for them, never a case).
        self._items = asyncio.create_task(self._post_items(cases))

    async def _post_items(self, cases: Iterable[EvalCaseSpec]) -> None:
        pending: set[asyncio.Task[None]] = set()
        for case in cases:  # a bounded number of items in flight, however many cases
            if DATASET_ITEM_KEY in case.metadata:
                continue  # read from the dataset: it is there
            if len(pending) >= _SENDERS * 2:
                _, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
            pending.add(asyncio.create_task(self._post_item(case)))
        if pending:
            await asyncio.wait(pending)

    async def _post_item(self, case: EvalCaseSpec) -> None:
        await self._post(DATASET_ITEMS_PATH, self._item_body(case))

    def _item_body(self, case: EvalCaseSpec) -> dict[str, Any]:
        body: dict[str, Any] = {
            "datasetName": self.dataset,
            "id": item_id_of(self.dataset, case),
            "input": {"inputs": case.inputs, "context": case.context},
            "metadata": {"case_id": case.id, **case.metadata},
        }
        if case.expected_output is not None:
            body["expectedOutput"] = case.expected_output
        return body

    def attributes(self, case: EvalCaseSpec) -> dict[str, str]:
        """The ``langfuse.experiment.*`` attributes of the case's generation."""
        attributes = {
            A.EXPERIMENT_ID: self.experiment_id,
            A.EXPERIMENT_NAME: self.run_name,
            A.EXPERIMENT_ITEM_ID: item_id_of(self.dataset, case),
            A.EXPERIMENT_ITEM_METADATA: json.dumps({"case_id": case.id, **case.metadata}),
            A.EXPERIMENT_METADATA: json.dumps(
                {"experiment_run_name": self.run_name, **self.metadata}
            ),
        }
        if self.description:
            attributes[A.EXPERIMENT_DESCRIPTION] = self.description
        if self.dataset_id is not None:
            attributes[A.EXPERIMENT_DATASET_ID] = self.dataset_id
        if case.expected_output is not None:
            attributes[A.EXPERIMENT_ITEM_EXPECTED_OUTPUT] = json.dumps(case.expected_output)
        return attributes

    async def record(self, result: CaseResult, case: EvalCaseSpec) -> None:
        """Link the finished case to the run and queue its scores (it never waits for
        Langfuse, only for room in the queue)."""
        if result.trace_id is None or self._queue is None:
            return
        if self.dataset is not None:
            await self._link(result, case)
        for score in result.scores:
            self._scores.append(
                score_body(
                    str(score["name"]),
                    score["value"],
                    comment=score.get("comment"),
                    trace_id=result.trace_id,
                    observation_id=result.observation_id,
                    environment=self.config.environment,
                )
            )
        if len(self._scores) >= _SCORE_BATCH:
            await self._flush_scores()

    async def _link(self, result: CaseResult, case: EvalCaseSpec) -> None:
        """The finished case as an item of the dataset run."""
        assert self._queue is not None
        link: dict[str, Any] = {
            "runName": self.run_name,
            "datasetItemId": item_id_of(self.dataset, case),
            "traceId": result.trace_id,
            "createdAt": _now(),
            "metadata": {"case_id": result.id, "repeat": result.repeat},
        }
        if result.observation_id is not None:
            link["observationId"] = result.observation_id
        if self.description:
            link["runDescription"] = self.description
        await self._queue.put((DATASET_RUN_ITEMS_PATH, link))

    async def finish(self, summary: Summary) -> str | None:
        """Send what is queued, then the run-level scores; the run's URL if known."""
        if self._queue is None:
            return None
        if self._items is not None:
            await self._items
        await self._flush_scores()
        await self._queue.join()
        if self.dataset_run_id is not None:
            run_scores = [
                score_body(
                    "pass_rate",
                    summary.pass_rate,
                    comment=f"{summary.passed}/{summary.total} passed",
                    dataset_run_id=self.dataset_run_id,
                    environment=self.config.environment,
                )
            ]
            run_scores += [
                score_body(
                    f"mean_{name}",
                    mean,
                    dataset_run_id=self.dataset_run_id,
                    environment=self.config.environment,
                )
                for name, mean in summary.score_means().items()
            ]
            self._scores.extend(run_scores)
            await self._flush_scores()
            await self._queue.join()
        return self.run_url()

    def run_url(self) -> str | None:
        project = self.config.project_id
        if project is None:
            return None
        base = self.config.base_url.rstrip("/")
        if self.dataset_id is not None and self.dataset_run_id is not None:
            return f"{base}/project/{project}/datasets/{self.dataset_id}/runs/{self.dataset_run_id}"
        baseline = urllib.parse.quote(self.experiment_id, safe="")
        return f"{base}/project/{project}/experiments/results?baseline={baseline}"

    async def aclose(self) -> None:
        if self._items is not None and not self._items.done():
            self._items.cancel()
            await asyncio.gather(self._items, return_exceptions=True)
        if self._queue is not None:
            for _ in self._senders:
                await self._queue.put(None)
            await asyncio.gather(*self._senders, return_exceptions=True)
            self._queue = None
        if self._client is not None:
            await self._client.aclose()
            self._client = None

    # -- sending ------------------------------------------------------------------------

    async def _flush_scores(self) -> None:
        assert self._queue is not None
        while self._scores:
            batch, self._scores = self._scores[:_SCORE_BATCH], self._scores[_SCORE_BATCH:]
            events = [
                {"id": _event_id(), "timestamp": _now(), "type": "score-create", "body": body}
                for body in batch
            ]
            await self._queue.put((INGESTION_PATH, {"batch": events}))

    async def _send_loop(self) -> None:
        assert self._queue is not None
        queue = self._queue
        while True:
            job = await queue.get()
            try:
                if job is None:
                    return
                path, body = job
                if path == DATASET_RUN_ITEMS_PATH and self._items is not None:
                    await asyncio.shield(self._items)  # the item exists before its link
                answer = await self._post(path, body)
                if path == DATASET_RUN_ITEMS_PATH and isinstance(answer, dict):
                    run_id = answer.get("datasetRunId")
                    if isinstance(run_id, str) and self.dataset_run_id is None:
                        self.dataset_run_id = run_id
            finally:
                queue.task_done()

    async def _post(self, path: str, body: dict[str, Any]) -> Any:
        assert self._client is not None
        try:
            response = await self._client.post(path, json=body)
        except httpx.HTTPError as error:
            return self._failed(path, type(error).__name__)
        if response.status_code >= 400:
            return self._failed(path, f"HTTP {response.status_code}")
        try:
            return response.json()
        except ValueError:
            return None

    def _failed(self, path: str, why: str) -> None:
        self.failures += 1
        if self.failures == 1:
            logger.warning(
                "Langfuse experiment: %s failed (%s); the eval's results are unaffected",
                path,
                why,
            )
