"""The shipped cassettes replay offline and deterministically, and carry no credentials."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from templiqx_core import (
    CompiledInteraction,
    ExecutionRequest,
    NotFound,
    RenderRequest,
    RuntimeFailureError,
    compile_contract,
    fingerprint,
)
from templiqx_core._compiler import read_contract
from templiqx_langfuse.testing.cassettes import open_cassette
from templiqx_langfuse.testing.replay import ReplayingRuntime, recorded_endpoint, replaying_runtime
from tests.conftest import BOTH_IO, REFERENCE, REPO_ROOT, RuntimeFactory
from tests.loopback import LoopbackModelServer, chat_completion, json_reply

CASSETTES = REPO_ROOT / "cassettes"
CONTRACTS = {
    "greeting": REPO_ROOT / "examples" / "greeting.yaml",
    "bli-61": REFERENCE / "crm3" / "contracts" / "bli-61-date-term-extraction.yaml",
    "bli-62": REFERENCE / "crm3" / "contracts" / "bli-62-document-drafting.yaml",
}
CREDENTIAL_PATTERNS = [
    re.compile(r"Bearer\s+\S+", re.I),
    re.compile(r"\bsk-[A-Za-z0-9_-]{6,}"),
    re.compile(r"\bpk-lf-[A-Za-z0-9_-]+"),
    re.compile(r"\bsk-lf-[A-Za-z0-9_-]+"),
    re.compile(r"Basic\s+[A-Za-z0-9+/=]{8,}", re.I),
    re.compile(r"^\s*(authorization|api-key|x-api-key|cookie|set-cookie):", re.I | re.M),
]


def eval_request(name: str) -> tuple[ExecutionRequest, object]:
    contract, _ = read_contract(CONTRACTS[name])
    assert contract is not None
    case = contract.evals[0]
    result = compile_contract(
        contract, RenderRequest(inputs=case.inputs, context=case.context), ["structured_output"]
    )
    assert result.interaction is not None
    return ExecutionRequest(interaction=result.interaction), case.fake_output


def run(runtime: ReplayingRuntime, request: ExecutionRequest, io: str = "sync") -> Any:
    """``execute`` as a sync host calls it, or ``aexecute`` on an event loop."""
    if io == "async":
        return asyncio.run(runtime.aexecute(request))
    return runtime.execute(request)


def replay(cassette: str, name: str = "greeting", io: str = "sync") -> object:
    request, _ = eval_request(name)
    runtime = replaying_runtime(CASSETTES / f"{cassette}.yaml", env={})
    try:
        return run(runtime, request, io)
    finally:
        runtime.close()


@BOTH_IO
@pytest.mark.parametrize("name", sorted(CONTRACTS))
def test_success_cassettes_replay_the_eval_output(name: str, io: str) -> None:
    _, expected = eval_request(name)
    receipt = replay(f"{name}-success", name, io)
    assert receipt.output == expected  # type: ignore[attr-defined]
    assert receipt.output_fingerprint == fingerprint(expected)  # type: ignore[attr-defined]
    assert receipt.output_schema_valid is True  # type: ignore[attr-defined]


def test_bli61_cassette_gives_the_reference_fingerprint() -> None:
    receipt = replay("bli-61-success", "bli-61")
    assert receipt.output_fingerprint == (  # type: ignore[attr-defined]
        "66d6c3fbb03611b4b22deabbe9ef669e5ad69f59c1e90be4dee92d9c3a5188de"
    )


@BOTH_IO
def test_schema_invalid_cassette(io: str) -> None:
    assert replay("greeting-schema-invalid", io=io).output_schema_valid is False  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("cassette", "code", "retry"),
    [
        ("greeting-429-retry-after", "TQX_RUNTIME_RATE_LIMITED", 2000),
        ("greeting-503", "TQX_RUNTIME_UNAVAILABLE", None),
        ("greeting-malformed", "TQX_RUNTIME_INVALID_RESPONSE", None),
    ],
)
@BOTH_IO
def test_failure_cassettes(cassette: str, code: str, retry: int | None, io: str) -> None:
    with pytest.raises(RuntimeFailureError) as raised:
        replay(cassette, io=io)
    assert raised.value.code == code
    assert raised.value.failure.retry_after_ms == retry


def test_replay_is_deterministic_across_runs_and_processes() -> None:
    first = [replay(f"{n}-success", n) for n in sorted(CONTRACTS)]
    second = [replay(f"{n}-success", n) for n in sorted(CONTRACTS)]
    assert first == second
    code = (
        "import json, sys\n"
        "sys.path.insert(0, '.')\n"
        "from tests.langfuse.test_cassettes import replay, CONTRACTS\n"
        "print(json.dumps([replay(f'{n}-success', n).model_dump(mode='json')"
        " for n in sorted(CONTRACTS)]))\n"
    )
    outputs = [
        subprocess.run(
            [sys.executable, "-c", code],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        ).stdout
        for _ in range(2)
    ]
    assert outputs[0] == outputs[1]
    assert json.loads(outputs[0]) == [r.model_dump(mode="json") for r in first]  # type: ignore[attr-defined]


@BOTH_IO
def test_unmatched_request_fails_loudly_without_network(
    greeting: CompiledInteraction, io: str
) -> None:
    other = greeting.model_copy(update={"runtime_policy": {"temperature": 1}})
    runtime = replaying_runtime(CASSETTES / "greeting-success.yaml", env={})
    try:
        with pytest.raises(NotFound, match=r"greeting-success\.yaml: Can't play back") as e:
            run(runtime, ExecutionRequest(interaction=other), io)
        assert '+  "temperature": 1' in str(e.value)  # vcrpy's diff of the JSON bodies
    finally:
        runtime.close()


@BOTH_IO
def test_playback_never_repeats(io: str) -> None:
    request, _ = eval_request("greeting")
    runtime = replaying_runtime(CASSETTES / "greeting-success.yaml", env={})
    try:
        run(runtime, request, io)
        with pytest.raises(NotFound):
            run(runtime, request, io)
    finally:
        runtime.close()


def test_unplayed_interactions_are_reported() -> None:
    with open_cassette(CASSETTES / "greeting-success.yaml") as active:
        pass
    assert "1 recorded interaction(s) unplayed" in str(active.unplayed_error())


def test_cassettes_hold_no_credentials() -> None:
    files = sorted(CASSETTES.glob("*.yaml"))
    assert len(files) >= 7
    for path in files:
        text = path.read_text()
        for pattern in CREDENTIAL_PATTERNS:
            assert not pattern.search(text), f"{path.name}: {pattern.pattern}"


def test_cassettes_replay_on_any_machine() -> None:
    for path in sorted(CASSETTES.glob("*.yaml")):
        with open_cassette(path) as active:
            base, model = recorded_endpoint(active.cassette)
        assert base == "http://loopback.templiqx.invalid/v1" or base.startswith("https://")
        assert model
        interactions = yaml.safe_load(path.read_text())["interactions"]
        assert all("127.0.0.1" not in i["request"]["uri"] for i in interactions)


def test_recording_scrubs_credentials_on_both_sides(
    tmp_path: Path,
    model_server: LoopbackModelServer,
    make_runtime: RuntimeFactory,
    greeting: CompiledInteraction,
) -> None:
    from tests.conftest import MODEL_KEY

    leak = f"Bearer {MODEL_KEY}"
    model_server.set_responder(
        lambda request: json_reply(
            chat_completion({"greeting": MODEL_KEY}),
            headers={"set-cookie": f"session={MODEL_KEY}", "openai-organization": "org-secret"},
        )
    )
    path = tmp_path / "recorded.yaml"
    runtime = make_runtime(tracing=False)
    with open_cassette(path, record_mode="all", secrets=[MODEL_KEY]):
        runtime.execute(ExecutionRequest(interaction=greeting))
    text = path.read_text()
    assert MODEL_KEY not in text
    assert leak not in text
    assert "[REDACTED]" in text
    assert "set-cookie" not in text.lower()
    assert "org-secret" not in text
    assert "authorization" not in text.lower()
    assert "loopback.templiqx.invalid" in text


def test_host_plugin_fixtures(pytester: pytest.Pytester) -> None:
    """A host test suite gets the fixtures from the installed plugin, no conftest needed."""
    pytester.makepyfile(
        f"""
        import pytest
        from templiqx_core import ExecutionRequest, RenderRequest, compile_contract
        from templiqx_langfuse import LangfuseConfig, LangfuseTracedRuntime, ModelConfig

        def test_replay(templiqx_replay_runtime, langfuse_span_exporter):
            templiqx_replay_runtime({str(CASSETTES / "greeting-success.yaml")!r})
            interaction = compile_contract(
                {str(CONTRACTS["greeting"])!r},
                RenderRequest(inputs={{"name": "Ryan"}}, context={{"organization": "Blinqx"}}),
                ["structured_output"],
            ).interaction
            runtime = LangfuseTracedRuntime(
                ModelConfig(base_url="http://loopback.templiqx.invalid/v1", api_key="k1234",
                            model="loopback-model"),
                LangfuseConfig(public_key="pk-lf-host-test", secret_key="sk-lf-host-test"),
                span_exporter=langfuse_span_exporter,
            )
            receipt = runtime.execute(ExecutionRequest(interaction=interaction))
            runtime.close()
            assert receipt.output == {{"greeting": "Hello Ryan"}}
            assert [s.name for s in langfuse_span_exporter.get_finished_spans()] == ["greeting"]

        def test_unplayed(templiqx_replay_runtime):
            templiqx_replay_runtime({str(CASSETTES / "greeting-success.yaml")!r})

        def test_replay_runtime(templiqx_replay_runtime, langfuse_span_exporter):
            runtime = templiqx_replay_runtime({str(CASSETTES / "greeting-success.yaml")!r})
            interaction = compile_contract(
                {str(CONTRACTS["greeting"])!r},
                RenderRequest(inputs={{"name": "Ryan"}}, context={{"organization": "Blinqx"}}),
                ["structured_output"],
            ).interaction
            receipt = runtime.execute(ExecutionRequest(interaction=interaction))
            runtime.close()  # flushes; the fixture closing it again is harmless
            assert receipt.output_fingerprint == {fingerprint({"greeting": "Hello Ryan"})!r}
            (span,) = langfuse_span_exporter.get_finished_spans()
            assert span.name == "greeting"

        def test_config(templiqx_vcr_config):
            assert templiqx_vcr_config["match_on"] == ("method", "uri", "body")
            assert "record_mode" not in templiqx_vcr_config  # --record-mode must win
            assert "authorization" in templiqx_vcr_config["filter_headers"]
        """
    )
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-W", "ignore"
    )
    # test_unplayed passes its body, then errors at teardown: the cassette was not used up.
    result.assert_outcomes(passed=4, errors=1)
    result.stdout.fnmatch_lines(["*UnplayedInteractions*1 recorded interaction(s) unplayed*"])
