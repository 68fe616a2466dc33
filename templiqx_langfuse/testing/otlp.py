"""A loopback OTLP/HTTP trace receiver standing in for Langfuse in tests and benchmarks.

It decodes every export (protobuf, gzip or not) so a test can count and inspect the
spans that would have reached Langfuse, or it misbehaves on purpose (500, hang) to
prove that a Langfuse outage costs the caller nothing.
"""

from __future__ import annotations

import gzip
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Literal

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from .server import LoopbackModelServer, Reply, ServerRequest

__all__ = ["LoopbackOtlpReceiver", "ReceiverMode", "otlp_receiver"]

ReceiverMode = Literal["ok", "error", "hang"]


class LoopbackOtlpReceiver:
    """Receives ``POST /api/public/otel/v1/traces``; ``base_url`` is a Langfuse base URL."""

    def __init__(self, mode: ReceiverMode = "ok", hang_s: float = 30.0) -> None:
        self.mode = mode
        self.hang_s = hang_s
        self._lock = threading.Lock()
        self.spans: list[Any] = []
        self.exports = 0
        self._server = LoopbackModelServer(self._respond)

    @property
    def base_url(self) -> str:
        return self._server.base_url.removesuffix("/v1")

    def _respond(self, request: ServerRequest) -> Reply:
        if self.mode == "hang":
            return Reply(hang_s=self.hang_s)
        if self.mode == "error":
            return Reply(status=500, body=b"receiver down")
        body = request.body
        if request.headers.get("content-encoding") == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        export.ParseFromString(body)
        spans = [
            span
            for resource in export.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]
        with self._lock:
            self.exports += 1
            self.spans.extend(spans)
        return Reply(status=200, headers={"content-type": "application/x-protobuf"}, body=b"")

    @property
    def requests(self) -> list[ServerRequest]:
        return self._server.requests

    def span_names(self) -> list[str]:
        with self._lock:
            return [span.name for span in self.spans]

    def start(self) -> LoopbackOtlpReceiver:
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop()


@contextmanager
def otlp_receiver(
    mode: ReceiverMode = "ok", hang_s: float = 30.0
) -> Iterator[LoopbackOtlpReceiver]:
    receiver = LoopbackOtlpReceiver(mode, hang_s).start()
    try:
        yield receiver
    finally:
        receiver.stop()
