"""Load and soak against a healthy loopback Langfuse: bounded, and they stop by themselves."""

from __future__ import annotations

import gc
import os
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from templiqx_core import CompiledMessage, ExecutionRequest, fingerprint
from tests.conftest import RuntimeFactory, closed_port
from tests.loopback import LoopbackModelServer
from tests.otlp_receiver import otlp_receiver
from tests.reliability.test_concurrency import per_request

THREADS, PER_THREAD, SOAK = 8, 200, 2000


def current_rss_mb() -> float:
    """Resident set size now (not the peak, which earlier tests may already have set)."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def test_eight_threads_by_200_every_generation_exported_once(
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    model_server.set_responder(per_request)
    base = greeting_request.interaction
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(
            langfuse_base_url=receiver.base_url, span_exporter=None, flush_timeout_s=10.0
        )

        def worker(thread: int) -> int:
            errors = 0
            for call in range(PER_THREAD):
                marker = f"t{thread}-c{call}"
                interaction = base.model_copy(
                    update={
                        "messages": [base.messages[0], CompiledMessage(role="user", content=marker)]
                    }
                )
                receipt = runtime.execute(ExecutionRequest(interaction=interaction))
                if receipt.output_fingerprint != fingerprint({"greeting": marker}):
                    errors += 1
            return errors

        with ThreadPoolExecutor(THREADS) as pool:
            cross_talk = sum(pool.map(worker, range(THREADS)))
        runtime.close()
        names = receiver.span_names()
    assert cross_talk == 0
    assert len(names) == THREADS * PER_THREAD
    assert set(names) == {"greeting"}
    ids = {bytes(span.span_id) for span in receiver.spans}
    assert len(ids) == THREADS * PER_THREAD  # each generation exactly once


@pytest.mark.parametrize("outage", ["down", "hanging"])
def test_eight_threads_by_200_with_langfuse_out(
    outage: str, make_runtime: RuntimeFactory, greeting_request: ExecutionRequest
) -> None:
    with otlp_receiver("hang", hang_s=30) as receiver:
        base = receiver.base_url if outage == "hanging" else f"http://127.0.0.1:{closed_port()}"
        runtime = make_runtime(langfuse_base_url=base, span_exporter=None, flush_timeout_s=2.0)

        def worker(_: int) -> int:
            return sum(
                runtime.execute(greeting_request).output_schema_valid for _ in range(PER_THREAD)
            )

        with ThreadPoolExecutor(THREADS) as pool:
            succeeded = sum(pool.map(worker, range(THREADS)))
        closing = time.monotonic()
        runtime.close()
        assert time.monotonic() - closing < 2.0 + 1.0
    assert succeeded == THREADS * PER_THREAD


def test_soak_rss_growth_stays_small(
    make_runtime: RuntimeFactory,
    greeting_request: ExecutionRequest,
) -> None:
    with otlp_receiver("ok") as receiver:
        runtime = make_runtime(langfuse_base_url=receiver.base_url, span_exporter=None)
        for _ in range(200):
            runtime.execute(greeting_request)
        gc.collect()
        before = current_rss_mb()
        for _ in range(SOAK):
            runtime.execute(greeting_request)
        gc.collect()
        growth_mb = current_rss_mb() - before
        runtime.close()
    print(f"soak: {SOAK} executes, RSS growth {growth_mb:.1f} MiB")
    assert growth_mb < 50
