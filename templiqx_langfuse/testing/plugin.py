"""pytest plugin (auto-loaded through the ``pytest11`` entry point): offline-first fixtures.

* ``templiqx_vcr_config`` — the scrubbing and matching rules as a pytest-recording
  ``vcr_config`` (no record mode, so ``--record-mode`` keeps working); a host opts in with
  ``def vcr_config(templiqx_vcr_config): return templiqx_vcr_config``.
* ``templiqx_cassette`` — ``templiqx_cassette(path=None)`` uses a cassette until the test
  ends; without a path, pytest-recording's per-test location. Record mode (``vcr_config``,
  ``vcr`` mark, ``--record-mode``), ``--disable-recording`` and ``--block-network`` are
  resolved as pytest-recording resolves them for a ``@pytest.mark.vcr`` test.
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
from contextlib import AbstractContextManager, nullcontext, suppress
from dataclasses import dataclass
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


@dataclass(frozen=True)
class _Recording:
    """What pytest-recording would do for this test were it marked ``@pytest.mark.vcr``."""

    disabled: bool  # --disable-recording: no cassette, real calls
    record_mode: str  # the cassette's
    network_open: bool  # its --block-network / block_network mark does not apply
    ignore_hosts: tuple[str, ...]  # vcr_config's: calls the cassette neither records nor answers


def _recording(request: pytest.FixtureRequest) -> _Recording:
    """Read through pytest-recording's own fixtures, resolved as its ``vcr`` and
    ``block_network`` fixtures do: the cassette takes a ``record_mode`` from ``vcr_config``
    merged with the ``vcr`` marks (closest mark wins) over ``--record-mode``; the network
    guard lets an explicit ``--record-mode`` win, and stays off unless the mode is ``none``.
    """
    from pytest_recording.utils import merge_kwargs

    from .cassettes import record_mode_of

    flag = str(request.getfixturevalue("record_mode"))  # --record-mode, or "none"
    merged = merge_kwargs(
        request.getfixturevalue("vcr_config"), request.getfixturevalue("vcr_markers")
    )
    configured = merged.get("record_mode", "none")
    explicit = request.config.getoption("--record-mode", None) is not None
    return _Recording(
        disabled=bool(request.getfixturevalue("disable_recording")),
        record_mode=record_mode_of(configured if "record_mode" in merged else flag),
        network_open=record_mode_of(flag if explicit else configured) != "none",
        ignore_hosts=tuple(str(host) for host in merged.get("ignore_hosts", ())),
    )


def _open_network(
    request: pytest.FixtureRequest, recording: _Recording
) -> AbstractContextManager[None]:
    """Lift pytest-recording's block for the test when it would not block a vcr test."""
    from ._offline import lifted

    request.getfixturevalue("block_network")  # its guard is in place before ours acts
    if not recording.network_open:
        return nullcontext()
    block: dict[str, Any] = {"allowed_hosts": request.getfixturevalue("allowed_hosts")}
    with suppress(pytest.FixtureLookupError):  # newer pytest-recording: private addresses too
        block["allow_private_ips"] = request.getfixturevalue("allow_private_ips")
    return lifted(**block)


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
) -> Iterator[Callable[..., Cassette | None]]:
    """``templiqx_cassette(path=None, *, secrets=())`` uses a cassette until the test ends
    (``None`` under ``--disable-recording``)."""
    from contextlib import ExitStack

    from .cassettes import open_cassette

    recording = _recording(request)
    opened: list[ActiveCassette] = []
    with ExitStack() as stack:
        stack.enter_context(_open_network(request, recording))

        def use(path: str | Path | None = None, *, secrets: Iterable[str] = ()) -> Cassette | None:
            if recording.disabled:
                return None  # as pytest-recording's ``vcr`` fixture: no cassette, real calls
            active = stack.enter_context(
                open_cassette(
                    path or _default_path(request),
                    record_mode=recording.record_mode,
                    secrets=secrets,
                    ignore_hosts=recording.ignore_hosts,
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
    from .replay import live_runtime, replaying_runtime

    recording = _recording(request)
    made: list[ReplayingRuntime] = []

    def build(path: str | Path | None = None, *, secrets: Iterable[str] = ()) -> ReplayingRuntime:
        # Placeholder keys only switch tracing on: spans go to the in-memory exporter.
        # A fresh public key per runtime: the SDK shares its resources per key. Scores
        # travel beside spans, not through the exporter: off, and nowhere to go.
        langfuse = LangfuseConfig(
            public_key=f"pk-lf-replay-{uuid.uuid4().hex[:12]}",
            secret_key="sk-lf-replay",  # noqa: S106 - a placeholder, never sent anywhere
            base_url="http://127.0.0.1:9",
            schema_score_name=None,
        )
        if recording.disabled:  # no cassette at all: real calls, as pytest-recording does
            runtime = live_runtime(langfuse=langfuse, span_exporter=langfuse_span_exporter)
        else:
            runtime = replaying_runtime(
                path or _default_path(request),
                record_mode=recording.record_mode,
                secrets=secrets,
                langfuse=langfuse,
                span_exporter=langfuse_span_exporter,
                ignore_hosts=recording.ignore_hosts,
            )
        made.append(runtime)
        if runtime.active is not None:
            _register(request, runtime.active)
        return runtime

    with _open_network(request, recording):
        try:
            yield build
        finally:
            for runtime in made:
                runtime.close()
    _check_teardown(request, [runtime.active for runtime in made if runtime.active is not None])
