"""One failure per cause in a host suite; what a replay may and may not reach."""

from __future__ import annotations

import asyncio
import shutil
import ssl
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from vcr.errors import CannotOverwriteExistingCassetteException

from templiqx_core import NotFound, PortError
from templiqx_langfuse import LangfuseTracedRuntime
from templiqx_langfuse.testing.cassettes import (
    CassetteMiss,
    Scrubber,
    no_match_error,
    open_cassette,
)
from templiqx_langfuse.testing.replay import replaying_runtime
from tests.conftest import REPO_ROOT
from tests.loopback import Reply, serve

GREETING = REPO_ROOT / "cassettes" / "greeting-success.yaml"
HIDDEN = "hunter2-correct-horse"
# a changed request: the cassette holds temperature 0
HOST_TESTS = """
import pytest
from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig


def request(temperature):
    interaction = compile_contract(
        "greeting.yaml",
        RenderRequest(inputs={"name": "Ryan"}, context={"organization": "Blinqx"}),
        ["structured_output"],
    ).interaction
    interaction = interaction.model_copy(update={"runtime_policy": {"temperature": temperature}})
    return ExecutionRequest(interaction=interaction)


def host_runtime():
    return LangfuseTracedRuntime(
        ModelConfig(base_url="http://loopback.templiqx.invalid/v1", api_key="k1234",
                    model="loopback-model")
    )


def test_changed_request_replay_runtime(templiqx_replay_runtime):
    templiqx_replay_runtime("greeting-success.yaml").execute(request(0.5))


def test_changed_request_own_runtime(templiqx_replay_runtime):
    templiqx_replay_runtime("greeting-success.yaml")
    with host_runtime() as runtime:
        runtime.execute(request(0.5))


def test_miss_caught_by_the_test(templiqx_replay_runtime):
    templiqx_replay_runtime("greeting-success.yaml")
    with host_runtime() as runtime, pytest.raises(Exception):
        runtime.execute(request(0.5))


def test_unplayed_after_a_pass(templiqx_replay_runtime):
    templiqx_replay_runtime("greeting-success.yaml")


def test_replayed_in_full(templiqx_replay_runtime):
    receipt = templiqx_replay_runtime("greeting-success.yaml").execute(request(0))
    assert receipt.output == {"greeting": "Hello Ryan"}
"""


def test_one_failure_per_cause(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    # pytest prints full messages in the summary on CI (CI/BUILD_NUMBER set), which would
    # double the counted text below: run the host suite as on a developer's machine.
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("BUILD_NUMBER", raising=False)
    shutil.copy(GREETING, pytester.path / "greeting-success.yaml")
    shutil.copy(REPO_ROOT / "examples" / "greeting.yaml", pytester.path / "greeting.yaml")
    pytester.makepyfile(test_host=HOST_TESTS)
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-rA"
    )
    # two changed requests fail their call once each; no teardown error joins them
    result.assert_outcomes(passed=3, failed=2, errors=2)  # 2 of the passes error at teardown
    outcomes = {
        line.split(" ")[1]: line.split(" ")[0]
        for line in result.stdout.lines
        if line.startswith(("PASSED test_host.py", "FAILED test_host.py", "ERROR test_host.py"))
    }
    assert outcomes == {
        "test_host.py::test_changed_request_replay_runtime": "FAILED",
        "test_host.py::test_changed_request_own_runtime": "FAILED",
        # the test passed, so what it hid or left unplayed fails its teardown, once
        "test_host.py::test_miss_caught_by_the_test": "ERROR",
        "test_host.py::test_unplayed_after_a_pass": "ERROR",
        "test_host.py::test_replayed_in_full": "PASSED",
    }
    text = result.stdout.str()
    assert "UnplayedInteractions" in text
    # each passing test's teardown names its unplayed interaction once (the caught miss
    # left its recorded twin unplayed)
    assert text.count("1 recorded interaction(s) unplayed") == 2
    # the failure names the cassette and shows what differed (vcrpy's body diff)
    assert "greeting-success.yaml: Can't play back this request: no recorded" in text
    assert '-  "temperature": 0' in text
    assert '+  "temperature": 0.5' in text


def test_miss_error_names_cassette_and_diff() -> None:
    """vcrpy's own miss (its closest recorded requests, its matchers' diff), as one error."""
    with (
        open_cassette(GREETING),
        pytest.raises(CannotOverwriteExistingCassetteException) as raised,
    ):
        httpx.post(
            "http://loopback.templiqx.invalid/v1/chat/completions",
            json={"model": "other", "key": HIDDEN},
        )
    error = no_match_error(raised.value, scrubber=Scrubber([HIDDEN]))
    assert isinstance(error, CassetteMiss)
    assert isinstance(error, NotFound)
    assert error.code == "TQX_NOT_FOUND"
    assert str(GREETING) in str(error)
    assert "differ in body" in str(error)
    assert '-  "model": "loopback-model",' in str(error)  # vcrpy's diff of the JSON bodies
    assert HIDDEN not in str(error)  # request data is scrubbed on its way into the message
    assert "pytest --record-mode=rewrite" in str(error)  # the plugin's flag, not vcrpy's modes
    assert "record_mode=" not in str(error)
    brief = str(no_match_error(raised.value, brief=True))
    assert "\n" not in brief
    assert "differ in body" in brief
    assert "model" not in brief


def test_missing_cassette_under_none_is_not_found() -> None:
    with pytest.raises(NotFound, match="does not exist"), open_cassette("nope.yaml"):
        pass


def test_langfuse_traffic_is_neither_recorded_nor_a_miss(tmp_path: Path) -> None:
    """A loopback Langfuse still gets spans and scores while a cassette replays."""
    with serve(lambda request: Reply(status=202)) as langfuse:
        base = langfuse.base_url.removesuffix("/v1")
        with open_cassette(GREETING) as active:
            response = httpx.post(f"{base}/api/public/scores", json={"name": "x"})
        assert response.status_code == 202  # passed through: no miss raised
        assert active.cassette.play_count == 0
        with open_cassette(tmp_path / "new.yaml", record_mode="once"):
            httpx.post(f"{base}/api/public/otel/v1/traces", content=b"spans")
        assert not (tmp_path / "new.yaml").exists()  # nothing recorded, nothing written
        assert [r.path for r in langfuse.requests] == [
            "/api/public/scores",
            "/api/public/otel/v1/traces",
        ]


def _model_tls_context(runtime: LangfuseTracedRuntime) -> ssl.SSLContext:
    context = runtime._wiring.clients._options["verify"]
    assert isinstance(context, ssl.SSLContext)
    return context


def test_replay_only_model_client_trusts_no_certificate(tmp_path: Path) -> None:
    # Replay never connects (vcrpy answers every call): its model client
    # skips loading the CA store (~20 ms of the CLI's --replay run) and fails closed.
    replaying = replaying_runtime(GREETING)
    with replaying:
        context = _model_tls_context(replaying.inner)
        assert context.verify_mode is ssl.CERT_REQUIRED
        assert context.check_hostname
        assert context.cert_store_stats()["x509_ca"] == 0
    # A runtime that may record keeps the runtime's own client, which verifies.
    recording = replaying_runtime(
        tmp_path / "new.yaml",
        record_mode="once",
        env={
            "TEMPLIQX_MODEL_BASE_URL": "http://127.0.0.1:9/v1",
            "TEMPLIQX_MODEL": "m",
            "TEMPLIQX_MODEL_API_KEY": "sk-record-0123456789",
        },
    )
    with recording:
        context = _model_tls_context(recording.inner)
        assert context.verify_mode is ssl.CERT_REQUIRED
        assert context.cert_store_stats()["x509_ca"] > 0


STREAM_CASSETTE = REPO_ROOT / "cassettes" / "greeting-stream-litellm.yaml"


def test_an_async_host_replaying_the_streaming_host_gets_not_found_and_its_close_ends_replay(
    tmp_path: Path,
) -> None:
    """The ``openai-stream`` entry point replays as the ``langfuse`` one does: an awaited
    miss is the cassette's ``NotFound``, and ``aclose`` lifts the replay (the network is
    reachable again)."""
    from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
    from templiqx_core.adapters import RuntimeOptions
    from templiqx_streaming_host._runtime import runtime_factory  # its entry point

    compiled = compile_contract(
        REPO_ROOT / "examples" / "greeting.yaml",
        RenderRequest(inputs={"name": "Someone else"}, context={"organization": "Blinqx"}),
    )
    assert compiled.interaction is not None
    runtime = runtime_factory(RuntimeOptions(replay=STREAM_CASSETTE, env={}))

    async def scenario() -> None:
        with pytest.raises(NotFound) as raised:
            await runtime.aexecute(ExecutionRequest(interaction=compiled.interaction))
        assert "greeting-stream-litellm.yaml" in str(raised.value)
        await runtime.aclose()

    with serve(lambda request: Reply(200, {}, b"{}")) as server:
        anyio.run(scenario)
        assert httpx.get(server.base_url).status_code == 200


def _greeting(name: str) -> Any:
    from templiqx_core import ExecutionRequest, RenderRequest, compile_contract

    compiled = compile_contract(
        REPO_ROOT / "examples" / "greeting.yaml",
        RenderRequest(inputs={"name": name}, context={"organization": "Blinqx"}),
    )
    assert compiled.interaction is not None
    return ExecutionRequest(interaction=compiled.interaction)


@pytest.mark.parametrize("entry_point", ["langfuse", "openai-stream"])
def test_a_replay_streams_live_when_awaited_and_a_closed_one_ends_its_stream_with_failed(
    entry_point: str,
) -> None:
    """Awaited, the replay streams what the runtime streams (the same events as the
    synchronous call); closed, either call still ends its stream with one ``Failed``."""
    from templiqx_core.adapters import RuntimeOptions
    from templiqx_langfuse._factory import runtime_factory as langfuse_factory
    from templiqx_streaming_host._runtime import runtime_factory as stream_factory

    factory = stream_factory if entry_point == "openai-stream" else langfuse_factory
    cassette = STREAM_CASSETTE if entry_point == "openai-stream" else GREETING
    request = _greeting("Ryan")
    synced: list[Any] = []
    with factory(RuntimeOptions(replay=cassette, env={})) as runtime:
        runtime.execute_streaming(request, synced.append)
    runtime = factory(RuntimeOptions(replay=cassette, env={}))
    awaited: list[Any] = []
    closed: list[tuple[str, list[Any]]] = []

    async def failed(call: Any) -> None:
        events: list[Any] = []
        try:
            await call(request, events.append)
        except PortError as error:
            closed.append((error.code, events))

    async def scenario() -> None:
        await runtime.aexecute_streaming(request, awaited.append)
        await runtime.aclose()
        await failed(runtime.aexecute_streaming)
        await failed(lambda *args: asyncio.to_thread(runtime.execute_streaming, *args))

    anyio.run(scenario)
    assert [e.model_dump() for e in awaited] == [e.model_dump() for e in synced]
    kinds = [e.kind for e in awaited]
    assert kinds == ["Delta"] * (9 if entry_point == "openai-stream" else 0) + ["Complete"]
    for code, events in closed:
        assert code == "TQX_RUNTIME_CLOSED"
        assert [(e.kind, e.code) for e in events] == [("Failed", "TQX_RUNTIME_CLOSED")]
    assert len(closed) == 2


#: A well-shaped pair vcrpy itself cannot load (its headers are text, not a mapping).
UNLOADABLE = (
    "interactions: [{request: {method: P, uri: u, body: b, headers: abc},"
    " response: {status: {code: 200}, headers: {}, body: {string: ''}}}]\n"
)


def test_a_cassette_vcrpy_cannot_load_is_invalid_data_in_a_host_suite(
    pytester: pytest.Pytester,
) -> None:
    """As under ``--replay``: the plugin's default and explicit cassettes alike."""
    (pytester.path / "cassettes" / "test_host").mkdir(parents=True)
    (pytester.path / "cassettes" / "test_host" / "test_default.yaml").write_text(UNLOADABLE)
    (pytester.path / "bad.yaml").write_text(UNLOADABLE)
    pytester.makepyfile(
        test_host="""
        def test_default(templiqx_replay_runtime):
            templiqx_replay_runtime()

        def test_explicit(templiqx_replay_runtime):
            templiqx_replay_runtime("bad.yaml")
        """
    )
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "-p", "no:hypothesispytest")
    result.assert_outcomes(failed=1, errors=1)
    result.stdout.fnmatch_lines(
        [
            "*InvalidData: */test_default.yaml: not a readable cassette (ValueError)",
            "*InvalidData: */bad.yaml: not a readable cassette (ValueError)",
        ]
    )
