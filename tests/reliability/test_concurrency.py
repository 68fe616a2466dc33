"""One runtime, many threads: no errors and no cross-talk between receipts."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from templiqx_core import CompiledMessage, ExecutionRequest, fingerprint
from tests.conftest import RuntimeFactory
from tests.loopback import (
    LoopbackModelServer,
    Reply,
    ServerRequest,
    chat_completion,
    json_reply,
)

THREADS, PER_THREAD = 8, 200


def per_request(request: ServerRequest) -> Reply:
    """Answers with the caller's own marker, so a swapped response is detectable."""
    marker = request.json()["messages"][-1]["content"]
    return json_reply(chat_completion({"greeting": marker}))


def test_threads_get_their_own_receipts(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    exporter: InMemorySpanExporter,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(per_request)
    runtime = make_runtime()
    base = greeting_request.interaction

    def worker(thread: int) -> list[tuple[str, str, str]]:
        results = []
        for call in range(PER_THREAD):
            marker = f"t{thread}-c{call}"
            messages = [base.messages[0], CompiledMessage(role="user", content=marker)]
            interaction = base.model_copy(update={"messages": messages})
            receipt = runtime.execute(ExecutionRequest(interaction=interaction))
            results.append((marker, receipt.output["greeting"], receipt.output_fingerprint))  # type: ignore[index,call-overload]
        return results

    with ThreadPoolExecutor(THREADS) as pool:
        results = [row for rows in pool.map(worker, range(THREADS)) for row in rows]
    assert len(results) == THREADS * PER_THREAD
    for marker, echoed, output_fp in results:
        assert echoed == marker
        assert output_fp == fingerprint({"greeting": marker})
    runtime.close()
    assert len(exporter.get_finished_spans()) == THREADS * PER_THREAD
