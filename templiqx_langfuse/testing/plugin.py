"""pytest plugin (auto-loaded through the ``pytest11`` entry point): offline-first fixtures.

* ``templiqx_vcr_config`` — the cassette rules as a pytest-recording ``vcr_config``; a
  host opts in with ``def vcr_config(templiqx_vcr_config): return templiqx_vcr_config``.
* ``templiqx_cassette`` — replay a cassette for the test; the test fails when a request
  has no recorded match or when recorded interactions were left unplayed.
* ``langfuse_span_exporter`` — an in-memory exporter, so a test asserts on exactly what
  would have been traced to Langfuse, without any export leaving the process.
* ``templiqx_replay_runtime`` — ``templiqx_replay_runtime(path)`` is a
  ``LangfuseTracedRuntime`` answered by that cassette (endpoint and model read from it,
  no keys) and traced into ``langfuse_span_exporter``; closed and checked at teardown.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

if TYPE_CHECKING:
    from vcr.cassette import Cassette

    from .._runtime import LangfuseTracedRuntime

# vcr is imported inside the fixtures, not here: this module loads with pytest, before
# pytest-recording asks pytest to rewrite vcr's asserts (an early import would defeat it).

__all__ = [
    "langfuse_span_exporter",
    "templiqx_cassette",
    "templiqx_replay_runtime",
    "templiqx_vcr_config",
]


@pytest.fixture(scope="session")
def templiqx_vcr_config() -> dict[str, Any]:
    from .cassettes import cassette_config

    return cassette_config()


@pytest.fixture
def langfuse_span_exporter() -> InMemorySpanExporter:
    return InMemorySpanExporter()


@pytest.fixture
def templiqx_cassette() -> Iterator[Callable[[str | Path], Cassette]]:
    """``templiqx_cassette(path)`` replays ``path`` until the test ends, then checks it."""
    from .cassettes import use_cassette

    with ExitStack() as stack:

        def replay(path: str | Path) -> Cassette:
            return stack.enter_context(use_cassette(path))

        yield replay


@pytest.fixture
def templiqx_replay_runtime(
    templiqx_cassette: Callable[[str | Path], Cassette],
    langfuse_span_exporter: InMemorySpanExporter,
) -> Iterator[Callable[[str | Path], LangfuseTracedRuntime]]:
    from .._config import LangfuseConfig, ModelConfig
    from .._runtime import LangfuseTracedRuntime
    from .replay import recorded_endpoint

    made: list[LangfuseTracedRuntime] = []

    def build(path: str | Path) -> LangfuseTracedRuntime:
        templiqx_cassette(path)
        base_url, model = recorded_endpoint(Path(path))
        runtime = LangfuseTracedRuntime(
            ModelConfig(base_url=base_url, api_key="replay-no-key", model=model),
            # Placeholder keys only switch tracing on: spans go to the in-memory exporter.
            # A fresh public key per runtime: the SDK shares its resources per key.
            LangfuseConfig(
                public_key=f"pk-lf-replay-{uuid.uuid4().hex[:12]}",
                secret_key="sk-lf-replay",  # noqa: S106 - a placeholder, never sent anywhere
            ),
            span_exporter=langfuse_span_exporter,
        )
        made.append(runtime)
        return runtime

    yield build
    for runtime in made:
        runtime.close()
