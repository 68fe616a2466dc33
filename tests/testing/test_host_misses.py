"""Host tests that explain themselves: a test that never calls the model needs no
cassette, and a cassette miss an app turned into a 500 fails that very test with the
miss and its diff. Each runs as a host project runs it (pytest in process)."""

from __future__ import annotations

import shutil

import pytest

from tests.conftest import REPO_ROOT
from tests.testing.conftest import Provider

pytest.importorskip("fastapi")

#: A FastAPI app whose error handler turns any runtime failure into a 500, and its tests.
APP_TESTS = """
import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from templiqx_core import ExecutionRequest, PortError, RenderRequest, compile_contract

app = FastAPI()


class Greet(BaseModel):
    name: str
    temperature: float = 0


@app.exception_handler(PortError)
async def failed(request, error):
    return JSONResponse({"error": error.code}, status_code=500)


@app.post("/greet")
async def greet(body: Greet):
    interaction = compile_contract(
        "greeting.yaml",
        RenderRequest(inputs={"name": body.name}, context={"organization": "Blinqx"}),
        ["structured_output"],
    ).interaction
    interaction = interaction.model_copy(
        update={"runtime_policy": {"temperature": body.temperature}}
    )
    receipt = await app.state.runtime.aexecute(ExecutionRequest(interaction=interaction))
    return receipt.output


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def vcr_config(templiqx_vcr_config):
    return {**templiqx_vcr_config, "ignore_hosts": [*templiqx_vcr_config["ignore_hosts"], "app"]}


async def post(runtime, body):
    app.state.runtime = runtime
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        response = await client.post("/greet", json=body)
    await runtime.aclose()
    return response
"""

MISSES = """
@pytest.mark.anyio
async def test_expects_a_greeting(templiqx_replay_runtime):
    response = await post(
        templiqx_replay_runtime("greeting-success.yaml"), {"name": "Ryan", "temperature": 0.5}
    )
    assert response.status_code == 200


@pytest.mark.anyio
async def test_expects_an_error_page(templiqx_replay_runtime):
    response = await post(
        templiqx_replay_runtime("greeting-success.yaml"), {"name": "Ryan", "temperature": 0.5}
    )
    assert response.status_code == 500  # passes: the miss is the only thing it shows


@pytest.mark.anyio
async def test_replays(templiqx_replay_runtime):
    response = await post(templiqx_replay_runtime("greeting-success.yaml"), {"name": "Ryan"})
    assert response.json() == {"greeting": "Hello Ryan"}
"""

NO_CALL = """
@pytest.mark.anyio
async def test_rejected_before_the_call(templiqx_replay_runtime):
    response = await post(templiqx_replay_runtime(), {"name": 42})
    assert response.status_code == 422


def test_builds_a_runtime_it_never_calls(templiqx_replay_runtime):
    assert templiqx_replay_runtime().descriptor() is not None


@pytest.mark.anyio
async def test_greets(templiqx_replay_runtime):
    response = await post(templiqx_replay_runtime(), {"name": "Ryan"})
    assert response.json()["greeting"].startswith("Hello Ryan")
"""


def host_run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:hypothesispytest", "-rA", *args
    )


@pytest.fixture
def app_host(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    for name in ("CI", "BUILD_NUMBER"):  # pytest prints a developer's summary
        monkeypatch.delenv(name, raising=False)
    shutil.copy(REPO_ROOT / "examples" / "greeting.yaml", pytester.path / "greeting.yaml")
    return pytester


def test_a_miss_an_app_turned_into_a_500_fails_that_test_with_its_diff(
    app_host: pytest.Pytester,
) -> None:
    shutil.copy(REPO_ROOT / "cassettes" / "greeting-success.yaml", app_host.path)
    app_host.makepyfile(test_app=APP_TESTS + MISSES)
    result = host_run(app_host)
    # each miss fails its own test; nothing is left for a teardown error to report
    result.assert_outcomes(passed=1, failed=2)
    outcomes = {
        line.split(" ")[1]: line.split(" ")[0]
        for line in result.stdout.lines
        if line.startswith(("PASSED test_app.py", "FAILED test_app.py", "ERROR test_app.py"))
    }
    assert outcomes == {
        "test_app.py::test_expects_a_greeting": "FAILED",
        "test_app.py::test_expects_an_error_page": "FAILED",
        "test_app.py::test_replays": "PASSED",
    }
    text = result.stdout.str()
    assert "UnplayedInteractions" not in text
    assert "templiqx cassette: unmatched request" in text  # beside `assert 500 == 200`
    assert "the test passed, but the code under test met a cassette miss" in text
    # both show which cassette, what differs and the body diff
    assert text.count("greeting-success.yaml: Can't play back this request") == 2
    assert text.count('+  "temperature": 0.5') == 2


def test_a_test_that_never_calls_the_model_needs_no_cassette(
    app_host: pytest.Pytester, provider: Provider
) -> None:
    app_host.makepyfile(test_app=APP_TESTS + NO_CALL)
    recorded = host_run(app_host, "--record-mode=once")
    recorded.assert_outcomes(passed=3)
    assert provider.calls == 1
    cassettes = sorted(p.name for p in (app_host.path / "cassettes" / "test_app").iterdir())
    assert cassettes == ["test_greets.yaml"]  # recording writes none for the others

    provider.version = 2  # a replay reaches no provider
    host_run(app_host).assert_outcomes(passed=3)
    assert provider.calls == 1

    # a call without a cassette is a miss that says so
    (app_host.path / "cassettes" / "test_app" / "test_greets.yaml").unlink()
    missing = host_run(app_host)
    missing.assert_outcomes(passed=2, failed=1)
    missing.stdout.fnmatch_lines(["*test_greets.yaml: *the cassette doesn't exist*"])
