"""A loopback fake of Langfuse's public API: what an eval run sends, validated as the
server validates it.

The request models mirror the server's zod schemas (``web/src/features/public-api/types/
datasets.ts``: ``PostDatasetsV2Body``, ``PostDatasetItemsV1Body``,
``PostDatasetRunItemsV1Body``; ``packages/shared/src/server/ingestion/types.ts``: the
ingestion batch, the event base and ``ScoreBody`` with ``applyScoreValidation``). One
deliberate difference: where zod's ``z.object`` drops unknown keys, these models refuse
them, so a misspelt field fails a test instead of vanishing. Trace exports (OTLP) are
decoded, and the spans the server would take as experiment items are counted the way
``extractExperimentFields`` reads them.
"""

from __future__ import annotations

import base64
import gzip
import itertools
import json
import re
import threading
from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl, urlsplit

from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    TypeAdapter,
    ValidationError,
    model_validator,
)

from tests.loopback import LoopbackModelServer, Reply, ServerRequest, json_reply
from tests.otlp_receiver import attributes_of

TRACES_PATH = "/api/public/otel/v1/traces"
PUBLIC_KEY, SECRET_KEY = "pk-lf-eval-0123", "sk-lf-eval-0123"


def _iso_with_offset(value: str) -> str:
    """``z.iso.datetime({offset: true})``: ISO 8601 with ``Z`` or an offset."""
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:\d\d)", value):
        raise ValueError("not an ISO datetime with offset")
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


IsoDateTime = Annotated[str, AfterValidator(_iso_with_offset)]
IdSchema = Annotated[str, Field(min_length=1, max_length=800, pattern=r"^[^\r]*$")]
PublicApiId = Annotated[str, Field(min_length=1, max_length=255)]


def _environment(value: str) -> str:
    stripped = re.sub(r"^(?:langfuse[-_]?)+", "", value.lower())[:40]
    if not stripped or not re.fullmatch(r"[a-z0-9-_]+", stripped):
        raise ValueError("not an environment name")
    return value


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class PostDatasetsV2Body(Strict):
    name: str
    description: str | None = None
    metadata: JsonValue = None
    inputSchema: JsonValue = None
    expectedOutputSchema: JsonValue = None


class PostDatasetItemsV1Body(Strict):
    datasetName: str
    input: Any = None
    expectedOutput: Any = None
    metadata: Any = None
    id: PublicApiId | None = None
    sourceTraceId: str | None = None
    sourceObservationId: str | None = None
    status: Literal["ACTIVE", "ARCHIVED"] | None = None


class PostDatasetRunItemsV1Body(Strict):
    runName: str
    runDescription: str | None = None
    metadata: JsonValue = None
    datasetItemId: str
    observationId: str | None = None
    traceId: str | None = None
    datasetVersion: IsoDateTime | None = None
    createdAt: IsoDateTime | None = None

    @model_validator(mode="after")
    def _linked(self) -> PostDatasetRunItemsV1Body:
        if not (self.observationId or self.traceId):
            raise ValueError("observationId or traceId must be provided")
        return self


class ScoreBody(Strict):
    id: IdSchema | None = None
    name: Annotated[str, Field(min_length=1)]
    traceId: str | None = None
    sessionId: str | None = None
    datasetRunId: str | None = None
    environment: Annotated[str, AfterValidator(_environment)] | None = None
    observationId: str | None = None
    comment: str | None = None
    metadata: JsonValue = None
    source: Literal["API", "EVAL", "ANNOTATION"] = "API"
    executionTraceId: str | None = None
    queueId: str | None = None
    value: float | str
    dataType: Literal["NUMERIC", "CATEGORICAL", "BOOLEAN", "TEXT"] | None = None
    configId: str | None = None

    @model_validator(mode="after")
    def _by_type_and_target(self) -> ScoreBody:
        kind, value = self.dataType, self.value
        if kind in ("NUMERIC", "BOOLEAN") and isinstance(value, str):
            raise ValueError(f"{kind} scores take a number")
        if kind == "BOOLEAN" and value not in (0, 1):
            raise ValueError("Value must be a number equal to either 0 or 1 for BOOLEAN")
        if kind in ("CATEGORICAL", "TEXT") and not isinstance(value, str):
            raise ValueError(f"{kind} scores take a string")
        # applyScoreValidation: exactly one target; an observation needs its trace.
        trace, session, run = bool(self.traceId), bool(self.sessionId), bool(self.datasetRunId)
        if not (
            (trace and not session and not run)
            or (session and not trace and not run and not self.observationId)
            or (run and not trace and not session and not self.observationId)
        ):
            raise ValueError("Provide exactly one of traceId, sessionId or datasetRunId")
        return self


class ScoreEvent(Strict):
    id: IdSchema
    timestamp: IsoDateTime
    metadata: JsonValue = None
    type: Literal["score-create"]
    body: ScoreBody


class IngestionBatch(Strict):
    batch: list[dict[str, Any]]
    metadata: JsonValue = None


class FakeLangfuse:
    """Datasets, items, run items, scores and traces, kept for a test to inspect."""

    def __init__(self, *, fail_api: bool = False) -> None:
        self.fail_api = fail_api
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.errors: list[str] = []  # every request the server's schemas would refuse
        self.datasets: dict[str, dict[str, Any]] = {}
        self.items: dict[str, PostDatasetItemsV1Body] = {}
        self.runs: dict[tuple[str, str], str] = {}
        self.run_items: list[PostDatasetRunItemsV1Body] = []
        self.scores: list[ScoreBody] = []
        self.spans: list[dict[str, Any]] = []
        self._server = LoopbackModelServer(self._respond)

    @property
    def base_url(self) -> str:
        return self._server.base_url.removesuffix("/v1")

    def start(self) -> FakeLangfuse:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()

    def reset(self) -> None:
        with self._lock:
            self.run_items.clear()
            self.scores.clear()
            self.spans.clear()

    def experiment_item_spans(self) -> int:
        """Spans the server stores as experiment items: experiment and item ids set, and
        the span naming itself the item's root observation."""
        with self._lock:
            return sum(
                1
                for span in self.spans
                if span["attributes"].get("langfuse.experiment.id")
                and span["attributes"].get("langfuse.experiment.item.id")
                and span["attributes"].get("langfuse.experiment.item.root_observation_id")
                == span["span_id"]
            )

    # -- the server ---------------------------------------------------------------------

    def _respond(self, request: ServerRequest) -> Reply:
        expected = base64.b64encode(f"{PUBLIC_KEY}:{SECRET_KEY}".encode()).decode()
        if request.headers.get("authorization") not in (f"Basic {expected}", None) and (
            request.path != TRACES_PATH
        ):
            return json_reply({"message": "unauthorized"}, status=401)
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if request.path == TRACES_PATH:
            return self._traces(body, json_body="json" in request.headers.get("content-type", ""))
        if self.fail_api:
            return json_reply({"message": "down"}, status=500)
        if request.method == "GET":
            return self._list_items(request.path)
        try:
            return self._route(request.path, json.loads(body))
        except ValidationError as error:
            with self._lock:
                self.errors.append(f"{request.path}: {error}")
            return json_reply({"message": "Invalid request data"}, status=400)

    def _route(self, path: str, data: Any) -> Reply:
        now = "2026-01-01T00:00:00.000Z"
        with self._lock:
            if path == "/api/public/v2/datasets":
                body = PostDatasetsV2Body.model_validate(data)
                found = self.datasets.setdefault(body.name, {"id": f"ds-{next(self._ids)}"})
                found.update(name=body.name, description=body.description)
                return json_reply(
                    {
                        "id": found["id"],
                        "projectId": "p",
                        "name": body.name,
                        "description": body.description,
                        "metadata": body.metadata,
                        "inputSchema": None,
                        "expectedOutputSchema": None,
                        "createdAt": now,
                        "updatedAt": now,
                    }
                )
            if path == "/api/public/dataset-items":
                item = PostDatasetItemsV1Body.model_validate(data)
                if item.datasetName not in self.datasets:
                    return json_reply({"message": "dataset not found"}, status=404)
                key = item.id or f"item-{next(self._ids)}"
                self.items[key] = item
                return json_reply({"id": key, "datasetName": item.datasetName, "status": "ACTIVE"})
            if path == "/api/public/dataset-run-items":
                link = PostDatasetRunItemsV1Body.model_validate(data)
                item = self.items.get(link.datasetItemId)
                if item is None:
                    return json_reply({"message": "dataset item not found"}, status=404)
                run_id = self.runs.setdefault(
                    (item.datasetName, link.runName), f"run-{next(self._ids)}"
                )
                self.run_items.append(link)
                return json_reply(
                    {
                        "id": f"dri-{next(self._ids)}",
                        "datasetRunName": link.runName,
                        "datasetRunId": run_id,
                        "datasetItemId": link.datasetItemId,
                        "traceId": link.traceId,
                        "observationId": link.observationId,
                        "createdAt": now,
                        "updatedAt": now,
                    }
                )
            if path == "/api/public/ingestion":
                batch = IngestionBatch.model_validate(data)
                events = TypeAdapter(list[ScoreEvent]).validate_python(batch.batch)
                self.scores.extend(event.body for event in events)
                successes = [{"id": event.id, "status": 201} for event in events]
                return json_reply({"successes": successes, "errors": []}, status=207)
        return json_reply({"message": "not found"}, status=404)

    def seed(self, dataset: str, item_id: str, **fields: Any) -> None:
        """A dataset item someone else created (the UI, another tool)."""
        with self._lock:
            self.datasets.setdefault(dataset, {"id": f"ds-{next(self._ids)}", "name": dataset})
            self.items[item_id] = PostDatasetItemsV1Body(datasetName=dataset, id=item_id, **fields)

    def _list_items(self, target: str) -> Reply:
        """``GET /api/public/dataset-items`` (``GetDatasetItemsV1Query``/``Response``)."""
        parts = urlsplit(target)
        query = dict(parse_qsl(parts.query))
        if parts.path != "/api/public/dataset-items" or "datasetName" not in query:
            return json_reply({"message": "not found"}, status=404)
        page, limit = int(query.get("page", 1)), int(query.get("limit", 50))
        if page < 1 or not 1 <= limit <= 100:
            return json_reply({"message": "Invalid request data"}, status=400)
        with self._lock:
            dataset = self.datasets.get(query["datasetName"])
            if dataset is None:
                return json_reply({"message": "dataset not found"}, status=404)
            found = [(k, v) for k, v in self.items.items() if v.datasetName == dataset["name"]]
        now = "2026-01-01T00:00:00.000Z"
        chosen = found[(page - 1) * limit : page * limit]
        data = [
            {
                "datasetName": item.datasetName,
                "id": key,
                "status": item.status or "ACTIVE",
                "input": item.input,
                "expectedOutput": item.expectedOutput,
                "metadata": item.metadata,
                "sourceTraceId": None,
                "sourceObservationId": None,
                "datasetId": dataset["id"],
                "createdAt": now,
                "updatedAt": now,
                "mediaReferences": [],
            }
            for key, item in chosen
        ]
        pages = -(-len(found) // limit)
        meta = {"page": page, "limit": limit, "totalItems": len(found), "totalPages": pages}
        return json_reply({"data": data, "meta": meta})

    def _traces(self, body: bytes, *, json_body: bool) -> Reply:
        export = ExportTraceServiceRequest()
        if json_body:  # OTLP/JSON writes ids as hex, protobuf's JSON mapping as base64
            data = json.loads(body)
            for resource in data.get("resourceSpans", []):
                for scope in resource.get("scopeSpans", []):
                    for span in scope.get("spans", []):
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if span.get(key):
                                span[key] = base64.b64encode(bytes.fromhex(span[key])).decode()
            json_format.ParseDict(data, export)
        else:
            export.ParseFromString(body)
        spans = [
            {
                "name": span.name,
                "trace_id": span.trace_id.hex(),
                "span_id": span.span_id.hex(),
                "attributes": attributes_of(span),
            }
            for resource in export.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self._lock:
            self.spans.extend(spans)
        return Reply(status=200, headers={"content-type": "application/x-protobuf"}, body=b"")
