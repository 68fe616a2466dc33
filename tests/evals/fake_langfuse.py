"""A loopback fake of Langfuse's public API: what an eval run sends, validated as the
server validates it.

The request models mirror the server's zod schemas (``web/src/features/public-api/types/
datasets.ts``: ``PostDatasetsV2Body``, ``PostDatasetItemsV1Body``;
``packages/shared/src/features/scores/interfaces/api/shared.ts``: ``PostScoresBody``,
its value by ``dataType`` and ``applyScoreValidation``'s one target). ``POST
/api/public/scores`` takes a list of them, as the langfuse SDK's ``scores.create`` sends
it (202, or 207 with the counts). One deliberate difference: where zod's ``z.object``
drops unknown keys, these models refuse them, so a misspelt field fails a test instead
of vanishing. Trace exports (OTLP) are
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


class ScoreBody(Strict):
    id: str | None = None
    name: Annotated[str, Field(min_length=1)]
    traceId: str | None = None
    sessionId: str | None = None
    datasetRunId: str | None = None
    environment: Annotated[str, AfterValidator(_environment)] = "default"
    observationId: str | None = None
    comment: str | None = None
    metadata: JsonValue = None
    source: Literal["API", "ANNOTATION"] = "API"
    queueId: str | None = None
    value: Annotated[float, Field(allow_inf_nan=False)] | str
    dataType: Literal["NUMERIC", "CATEGORICAL", "BOOLEAN", "CORRECTION", "TEXT"] | None = None
    configId: str | None = None

    @model_validator(mode="after")
    def _by_type_and_target(self) -> ScoreBody:
        kind, value = self.dataType, self.value
        if kind in ("NUMERIC", "BOOLEAN") and isinstance(value, str):
            raise ValueError(f"{kind} scores take a number")
        if kind == "BOOLEAN" and value not in (0, 1):
            raise ValueError("Value must be a number equal to either 0 or 1 for BOOLEAN")
        if kind in ("CATEGORICAL", "CORRECTION", "TEXT") and not isinstance(value, str):
            raise ValueError(f"{kind} scores take a string")
        if kind == "TEXT" and not 1 <= len(str(value)) <= 500:
            raise ValueError("TEXT scores take 1 to 500 characters")
        # applyScoreValidation: exactly one target; an observation needs its trace.
        trace, session, run = bool(self.traceId), bool(self.sessionId), bool(self.datasetRunId)
        if not (
            (trace and not session and not run)
            or (session and not trace and not run and not self.observationId)
            or (run and not trace and not session and not self.observationId)
        ):
            raise ValueError("Provide exactly one of traceId, sessionId or datasetRunId")
        return self


class FakeLangfuse:
    """Datasets, items, scores and traces, kept for a test to inspect."""

    def __init__(self, *, fail_api: int = 0) -> None:
        self.fail_api = fail_api  # a status every API call answers (0: none)
        self.fail_once: set[str] = set()  # paths whose next call answers 503, retry-after 1 s
        self.calls: list[str] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.errors: list[str] = []  # every request the server's schemas would refuse
        self.datasets: dict[str, dict[str, Any]] = {}
        self.items: dict[str, PostDatasetItemsV1Body] = {}
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
        with self._lock:
            self.calls.append(f"{request.method} {request.path}")
            once = request.path in self.fail_once
            self.fail_once.discard(request.path)
        if once:
            return json_reply({"message": "busy"}, status=503, headers={"retry-after": "1"})
        if self.fail_api:
            return json_reply({"message": "refused"}, status=self.fail_api)
        if request.method == "GET" and request.path == "/api/public/projects":
            project = {"id": "proj-of-key", "name": "p", "metadata": {}}
            return json_reply({"data": [{**project, "organization": {"id": "o", "name": "o"}}]})
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
                return json_reply(self._item_json(key, item))
            if path == "/api/public/scores":  # each score on its own: 202, or 207 with counts
                refused = []
                for body in TypeAdapter(list[Any]).validate_python(data):
                    try:
                        self.scores.append(ScoreBody.model_validate(body))
                    except ValidationError as error:
                        refused.append({"message": str(error)})
                        self.errors.append(f"{path}: {error}")
                if not refused:
                    return json_reply({"message": "Accepted"}, status=202)
                counts = {"accepted": len(data) - len(refused), "rejected": len(refused)}
                return json_reply({**counts, "errors": refused}, status=207)
            if path == "/api/public/ingestion":  # the trace export's own scores, not the eval's
                events = data.get("batch", []) if isinstance(data, dict) else []
                ok = [{"id": event.get("id"), "status": 201} for event in events]
                return json_reply({"successes": ok, "errors": []}, status=207)
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
        chosen = found[(page - 1) * limit : page * limit]
        data = [self._item_json(key, item) for key, item in chosen]
        pages = -(-len(found) // limit)
        meta = {"page": page, "limit": limit, "totalItems": len(found), "totalPages": pages}
        return json_reply({"data": data, "meta": meta})

    def _item_json(self, key: str, item: PostDatasetItemsV1Body) -> dict[str, Any]:
        """A ``DatasetItem`` as the server answers it."""
        now = "2026-01-01T00:00:00.000Z"
        return {
            "datasetName": item.datasetName,
            "id": key,
            "status": item.status or "ACTIVE",
            "input": item.input,
            "expectedOutput": item.expectedOutput,
            "metadata": item.metadata,
            "sourceTraceId": None,
            "sourceObservationId": None,
            "datasetId": self.datasets[item.datasetName]["id"],
            "createdAt": now,
            "updatedAt": now,
            "mediaReferences": [],
        }

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
