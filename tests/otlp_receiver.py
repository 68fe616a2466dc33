"""A loopback Langfuse stand-in: decodes OTLP/HTTP protobuf trace exports (gzip or not)
and records posted scores, so a test sees what would have reached Langfuse; or misbehaves
(500, hang) to prove that an outage costs the caller nothing.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from tests.loopback import LoopbackModelServer, Reply, ServerRequest

__all__ = ["LoopbackOtlpReceiver", "ReceiverMode", "attributes_of", "otlp_receiver"]

ReceiverMode = Literal["ok", "error", "hang"]
TRACES_PATH = "/api/public/otel/v1/traces"


def _plain(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_plain(item) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {item.key: _plain(item.value) for item in value.kvlist_value.values}
    return getattr(value, kind) if kind else None


def attributes_of(span: Any) -> dict[str, Any]:
    """A received span's attributes as plain Python values (as the server converts them)."""
    return {item.key: _plain(item.value) for item in span.attributes}


class LoopbackOtlpReceiver(LoopbackModelServer):
    """Receives ``POST /api/public/otel/v1/traces``; ``base_url`` is a Langfuse base URL."""

    def __init__(self, mode: ReceiverMode = "ok", hang_s: float = 30.0, port: int = 0) -> None:
        self.mode = mode
        self.hang_s = hang_s
        self.spans: list[Any] = []
        self.scores: list[dict[str, Any]] = []
        super().__init__(self._respond, port)

    @property
    def base_url(self) -> str:
        return super().base_url.removesuffix("/v1")

    def _respond(self, request: ServerRequest) -> Reply:
        if self.mode == "hang":
            return Reply(hang_s=self.hang_s)
        if self.mode == "error":
            return Reply(status=500, body=b"receiver down")
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        if request.path != TRACES_PATH:
            return self._receive_scores(request.path, body)
        export = ExportTraceServiceRequest.FromString(body)
        with self.lock:
            self.spans.extend(
                span
                for resource in export.resource_spans
                for scope in resource.scope_spans
                for span in scope.spans
            )
        return Reply(status=200, headers={"content-type": "application/x-protobuf"}, body=b"")

    def _receive_scores(self, path: str, body: bytes) -> Reply:
        data = json.loads(body)
        if path == "/api/public/ingestion":
            scores = [e["body"] for e in data["batch"] if e.get("type") == "score-create"]
        elif path == "/api/public/scores":
            scores = data if isinstance(data, list) else [data]
        else:
            return Reply(status=404)
        with self.lock:
            self.scores.extend(scores)
        return Reply(status=207 if path.endswith("ingestion") else 200, body=b"{}")

    def span_names(self) -> list[str]:
        with self.lock:
            return [span.name for span in self.spans]


@contextmanager
def otlp_receiver(
    mode: ReceiverMode = "ok", hang_s: float = 30.0
) -> Iterator[LoopbackOtlpReceiver]:
    receiver = LoopbackOtlpReceiver(mode, hang_s).start()
    try:
        yield receiver
    finally:
        receiver.stop()
