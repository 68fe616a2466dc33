"""pytest plugin: a test using our runtime fixture is a ``@pytest.mark.vcr`` test whose VCR
has our rules as defaults and a scrubbing persister. Imports stay lazy: every host run loads it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from vcr import VCR
    from vcr.cassette import Cassette

    from .cassettes import ActiveCassette, Scrubber
    from .replay import ReplayingRuntime

__all__ = [
    "langfuse_span_exporter",
    "pytest_recording_configure",
    "pytest_runtest_makereport",
    "pytest_runtest_setup",
    "templiqx_replay_runtime",
    "templiqx_vcr_config",
]

_FIXTURE = "templiqx_replay_runtime"
_ACTIVE = pytest.StashKey["list[ActiveCassette]"]()
_CALL_FAILED = pytest.StashKey[bool]()
_SETTING_UP = pytest.StashKey["pytest.Item | None"]()
_VCR = pytest.StashKey[tuple["VCR", "Scrubber"]]()


def _ours(item: pytest.Item) -> bool:
    return _FIXTURE in getattr(item, "fixturenames", ())


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before fixtures: mark our fixture's test for pytest-recording, name it for its VCR."""
    if _ours(item) and item.get_closest_marker("vcr") is None:
        item.add_marker(pytest.mark.vcr)
    item.config.stash[_SETTING_UP] = item


@pytest.hookimpl(optionalhook=True)
def pytest_recording_configure(config: pytest.Config, vcr: VCR) -> None:
    """For our fixture's tests: our rules as the VCR's defaults, and a scrubbing persister."""
    item = config.stash.get(_SETTING_UP, None)
    if item is None or not _ours(item):
        return
    from .cassettes import Scrubber, ScrubbingPersister, cassette_config

    scrubber = Scrubber()
    for key, value in cassette_config(scrubber).items():
        setattr(vcr, key, value)
    vcr.register_persister(ScrubbingPersister(vcr.persister, scrubber))
    item.stash[_VCR] = (vcr, scrubber)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A miss the test did not see (an app made it a 500) fails that test, with its diff."""
    report = yield
    if report.when != "call":
        return report
    if opened := item.stash.get(_ACTIVE, []):
        from .cassettes import CassetteMiss, _causes, cassette_miss, no_match_error

        chain = _causes(call.excinfo.value if call.excinfo is not None else None)
        unseen = [m for a in opened for m in a.misses if all(m is not e for e in chain)]
        miss = cassette_miss(chain[0]) if chain else None
        if miss is not None and not any(isinstance(e, CassetteMiss) for e in chain):
            unseen.append(no_match_error(miss, scrubber=opened[0].scrubber))  # host's runtime
        text = "\n\n".join(dict.fromkeys(str(m) for m in unseen))
        if text and report.passed:
            report.outcome = "failed"
            report.longrepr = (
                f"the test passed, but the code under test met a cassette miss:\n{text}"
            )
        elif text:
            report.sections.append(("templiqx cassette: unmatched request", text))
    item.stash[_CALL_FAILED] = report.failed
    return report


@pytest.fixture(scope="session")
def templiqx_vcr_config() -> dict[str, Any]:
    """The scrubbing and matching rules as a ``vcr_config`` (no record mode)."""
    from .cassettes import cassette_config

    return cassette_config()


@pytest.fixture
def langfuse_span_exporter() -> InMemorySpanExporter:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    return InMemorySpanExporter()


@pytest.fixture
def templiqx_replay_runtime(
    request: pytest.FixtureRequest, langfuse_span_exporter: InMemorySpanExporter
) -> Iterator[Callable[..., ReplayingRuntime]]:
    """``templiqx_replay_runtime(path=None, *, secrets=())``: a runtime on the test's cassette
    (pytest-recording's, or ``path``'s); unplayed interactions fail a test that passed."""
    from pytest_recording.network import blocking_context
    from pytest_recording.utils import merge_kwargs

    from templiqx_core import InvalidData

    from .._config import LangfuseConfig
    from .cassettes import ActiveCassette
    from .replay import replaying_runtime

    fixture, stack = request.getfixturevalue, ExitStack()
    made: list[ReplayingRuntime] = []

    def open_(path: str | Path | None, secrets: Iterable[str]) -> ActiveCassette | None:
        cassette: Cassette | None = fixture("vcr")
        if cassette is None and fixture("disable_recording"):
            return None  # no cassette, real calls
        if cassette is None or _VCR not in request.node.stash:
            raise InvalidData(f"{request.node.nodeid}: take {_FIXTURE} as a test argument")
        vcr, scrubber = request.node.stash[_VCR]
        scrubber.add(secrets)
        if path is not None:
            kwargs = merge_kwargs(fixture("vcr_config"), fixture("vcr_markers"))
            path = Path(path).absolute()  # the working directory's, not the cassette directory's
            if kwargs.pop("record_mode", fixture("record_mode")) == "rewrite":
                path.unlink(missing_ok=True)  # as pytest-recording does to its own cassette
            kwargs["path_transformer"] = None
            cassette = stack.enter_context(vcr.use_cassette(str(path), **kwargs))
        # A missing cassette replays as empty: a call says so, a test without one passes.
        active = ActiveCassette(Path(cassette.path), cassette, scrubber)
        blocked = request.node.get_closest_marker("block_network") or request.config.getoption(
            "--block-network"
        )
        if active.replaying and not blocked:  # else pytest-recording's block applies
            stack.enter_context(blocking_context(allowed_hosts=["127.0.0.1", "::1", "localhost"]))
        request.node.stash.setdefault(_ACTIVE, []).append(active)
        return active

    def build(path: str | Path | None = None, *, secrets: Iterable[str] = ()) -> ReplayingRuntime:
        # Placeholder keys switch tracing on into the in-memory exporter; a fresh public key
        # per runtime, as the SDK shares resources per key. Scores would bypass it: off.
        langfuse = LangfuseConfig(
            public_key=f"pk-lf-replay-{uuid.uuid4().hex[:12]}",
            secret_key="sk-lf-replay",  # noqa: S106 - a placeholder, never sent anywhere
            base_url="http://127.0.0.1:9",
            schema_score_name=None,
        )
        active = open_(path, secrets)
        made.append(
            replaying_runtime(active, langfuse=langfuse, span_exporter=langfuse_span_exporter)
        )
        return made[-1]

    with stack:
        yield build
        for runtime in made:  # their traces flushed before the cassettes close
            runtime.close()
    if not request.node.stash.get(_CALL_FAILED, True):
        for active in request.node.stash.get(_ACTIVE, []):
            if (unplayed := active.unplayed_error()) is not None:
                raise unplayed
