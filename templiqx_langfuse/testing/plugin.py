"""pytest plugin (auto-loaded through the ``pytest11`` entry point): offline-first fixtures.

* ``templiqx_vcr_config`` — the scrubbing and matching rules as a pytest-recording
  ``vcr_config`` (no record mode, so ``--record-mode`` keeps working); a host opts in with
  ``def vcr_config(templiqx_vcr_config): return templiqx_vcr_config``.
* ``templiqx_cassette`` — ``templiqx_cassette(path=None)`` uses a cassette until the test
  ends, honouring ``--record-mode``; without a path, pytest-recording's per-test location.
* ``langfuse_span_exporter`` — an in-memory exporter, so a test asserts on exactly what
  would have been traced to Langfuse, without any export leaving the process.
* ``templiqx_replay_runtime`` — ``templiqx_replay_runtime(path=None)``: the
  ``LangfuseTracedRuntime`` answered by that cassette (replaying: endpoint and model read
  from it, no keys; recording: configured from the environment), traced into
  ``langfuse_span_exporter``; closed and checked at teardown.

A cause fails a test once: a request with no recorded match fails the call (the report
gets a section with what differed); unplayed interactions fail the teardown only when the
test otherwise passed. This module imports nothing heavy: pytest loads it in every host
run, so vcrpy, langfuse and OpenTelemetry are imported when a fixture is first used.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Generator, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from vcr.cassette import Cassette

    from .cassettes import ActiveCassette
    from .replay import ReplayingRuntime

__all__ = [
    "langfuse_span_exporter",
    "pytest_runtest_makereport",
    "templiqx_cassette",
    "templiqx_replay_runtime",
    "templiqx_vcr_config",
]

_ACTIVE = pytest.StashKey["list[ActiveCassette]"]()
_CALL_FAILED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_CALL_FAILED] = report.failed
        if report.failed:
            for active in item.stash.get(_ACTIVE, []):
                for index in range(len(active.misses)):
                    text = str(active.miss_error(index))
                    if text not in str(report.longrepr):  # not already the failure itself
                        report.sections.append(("templiqx cassette: unmatched request", text))
    return report


@pytest.fixture(scope="session")
def templiqx_vcr_config() -> dict[str, Any]:
    """Scrubbing and matching rules; keys in the environment are scrubbed when recording."""
    from .cassettes import cassette_config

    return cassette_config()


@pytest.fixture
def langfuse_span_exporter() -> InMemorySpanExporter:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


def _default_path(request: pytest.FixtureRequest) -> Path:
    """pytest-recording's per-test cassette: ``<test dir>/cassettes/<module>/<test>.yaml``."""
    directory = request.getfixturevalue("vcr_cassette_dir")
    name = request.getfixturevalue("default_cassette_name")
    return Path(directory) / f"{name}.yaml"


def _record_mode(request: pytest.FixtureRequest) -> str:
    """pytest-recording's ``--record-mode`` (``none`` when not given)."""
    return str(request.config.getoption("--record-mode", None) or "none")


def _check_teardown(request: pytest.FixtureRequest, opened: list[ActiveCassette]) -> None:
    """After a passing test: report what would otherwise go unnoticed, once."""
    if request.node.stash.get(_CALL_FAILED, True):
        return  # the call failed (or never ran): that failure already names the cause
    for active in opened:
        if active.misses:  # the test caught the miss and passed anyway
            raise active.miss_error()
        unplayed = active.unplayed_error()
        if unplayed is not None:
            raise unplayed


def _register(request: pytest.FixtureRequest, active: ActiveCassette) -> None:
    request.node.stash.setdefault(_ACTIVE, []).append(active)


@pytest.fixture
def templiqx_cassette(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., Cassette]]:
    """``templiqx_cassette(path=None, *, secrets=())`` uses a cassette until the test ends."""
    from contextlib import ExitStack

    from .cassettes import open_cassette

    opened: list[ActiveCassette] = []
    with ExitStack() as stack:

        def use(path: str | Path | None = None, *, secrets: Iterable[str] = ()) -> Cassette:
            active = stack.enter_context(
                open_cassette(
                    path or _default_path(request),
                    record_mode=_record_mode(request),
                    secrets=secrets,
                )
            )
            opened.append(active)
            _register(request, active)
            return active.cassette

        yield use
    _check_teardown(request, opened)


@pytest.fixture
def templiqx_replay_runtime(
    request: pytest.FixtureRequest,
    langfuse_span_exporter: InMemorySpanExporter,
) -> Generator[Callable[..., ReplayingRuntime], None, None]:
    """``templiqx_replay_runtime(path=None, *, secrets=())``: a runtime on that cassette."""
    from .._config import LangfuseConfig
    from .replay import replaying_runtime

    made: list[ReplayingRuntime] = []

    def build(path: str | Path | None = None, *, secrets: Iterable[str] = ()) -> ReplayingRuntime:
        runtime = replaying_runtime(
            path or _default_path(request),
            record_mode=_record_mode(request),
            secrets=secrets,
            # Placeholder keys only switch tracing on: spans go to the in-memory exporter.
            # A fresh public key per runtime: the SDK shares its resources per key. Scores
            # travel beside spans, not through the exporter: off, and nowhere to go.
            langfuse=LangfuseConfig(
                public_key=f"pk-lf-replay-{uuid.uuid4().hex[:12]}",
                secret_key="sk-lf-replay",  # noqa: S106 - a placeholder, never sent anywhere
                base_url="http://127.0.0.1:9",
                schema_score_name=None,
            ),
            span_exporter=langfuse_span_exporter,
        )
        made.append(runtime)
        _register(request, runtime.active)
        return runtime

    try:
        yield build
    finally:
        for runtime in made:
            runtime.close()
    _check_teardown(request, [runtime.active for runtime in made])
