"""pytest plugin (auto-loaded through the ``pytest11`` entry point): offline-first fixtures.

* ``templiqx_vcr_config`` — the cassette rules as a pytest-recording ``vcr_config``; a
  host opts in with ``def vcr_config(templiqx_vcr_config): return templiqx_vcr_config``.
* ``templiqx_cassette`` — replay a cassette for the test; the test fails when a request
  has no recorded match or when recorded interactions were left unplayed.
* ``langfuse_span_exporter`` — an in-memory exporter, so a test asserts on exactly what
  would have been traced to Langfuse, without any export leaving the process.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

if TYPE_CHECKING:
    from vcr.cassette import Cassette

# vcr is imported inside the fixtures, not here: this module loads with pytest, before
# pytest-recording asks pytest to rewrite vcr's asserts (an early import would defeat it).

__all__ = ["langfuse_span_exporter", "templiqx_cassette", "templiqx_vcr_config"]


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
