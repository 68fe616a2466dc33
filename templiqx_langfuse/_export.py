"""The adapter-owned span export path to Langfuse, built so an outage costs callers nothing.

The SDK's own exporter retries a dead endpoint for its whole timeout on every batch;
meanwhile the span queue fills and the SDK logs a warning for *every* span it then drops
— on the caller's thread. A circuit breaker in front of the exporter turns a failing
Langfuse into a quick, quiet drop: after a failed export, batches are discarded without
I/O for a cool-down period (counted, and reported once), then one export probes again.
"""

from __future__ import annotations

import base64
import logging
import threading
import time
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from ._config import LangfuseConfig

__all__ = ["CircuitBreakerExporter", "build_langfuse_exporter"]

logger = logging.getLogger("templiqx_langfuse")

OTLP_TRACES_PATH = "/api/public/otel/v1/traces"
EXPORT_TIMEOUT_S = 3.0
COOL_DOWN_S = 30.0


def _sdk_version() -> str:
    try:
        return version("langfuse")
    except PackageNotFoundError:  # pragma: no cover - langfuse is a dependency
        return "unknown"


def build_langfuse_exporter(config: LangfuseConfig) -> OTLPSpanExporter:
    """An OTLP/HTTP exporter for Langfuse's public OTel endpoint (basic auth, gzip)."""
    token = f"{config.public_key}:{config.secret_key}".encode()
    headers = {
        "Authorization": "Basic " + base64.b64encode(token).decode("ascii"),
        "x-langfuse-sdk-name": "python",
        "x-langfuse-sdk-version": _sdk_version(),
        "x-langfuse-public-key": str(config.public_key),
        "x-langfuse-ingestion-version": "4",
    }
    return OTLPSpanExporter(
        endpoint=f"{config.base_url}{OTLP_TRACES_PATH}",
        headers=headers,
        timeout=EXPORT_TIMEOUT_S,
        compression=Compression.Gzip,
    )


class CircuitBreakerExporter(SpanExporter):
    """Wraps an exporter; after a failure, drops batches without I/O for ``cool_down_s``."""

    def __init__(self, inner: SpanExporter, *, cool_down_s: float = COOL_DOWN_S) -> None:
        self.inner = inner
        self.cool_down_s = cool_down_s
        self.dropped = 0
        self.exported = 0
        self._open_until = 0.0
        self._lock = threading.Lock()
        self._warned = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if time.monotonic() < self._open_until:
            with self._lock:
                self.dropped += len(spans)
            return SpanExportResult.FAILURE
        try:
            result = self.inner.export(spans)
        except Exception:
            result = SpanExportResult.FAILURE
        with self._lock:
            if result is SpanExportResult.SUCCESS:
                self.exported += len(spans)
                self._open_until = 0.0
                return result
            self.dropped += len(spans)
            self._open_until = time.monotonic() + self.cool_down_s
            first = not self._warned
            self._warned = True
        if first:
            logger.warning(
                "Langfuse export failed; dropping traces for %.0f s before retrying "
                "(executions are unaffected)",
                self.cool_down_s,
            )
        return result

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)
