"""One recorded endpoint test and the eval gate, replayed from cassettes."""

import httpx
import pytest

from .service import TRIAGE, Ticket, app

CASES = [
    (Ticket(subject="Site down", body="Every page answers 500.", tier="enterprise"), "p1"),
    (Ticket(subject="Invoice copy", body="Please resend March.", tier="free"), "p3"),
]


@pytest.fixture(scope="module")
def vcr_config(templiqx_vcr_config):
    return {**templiqx_vcr_config, "ignore_hosts": [*templiqx_vcr_config["ignore_hosts"], "app"]}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_triage_endpoint(templiqx_replay_runtime):
    app.state.runtime = templiqx_replay_runtime()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
        headers = {"x-user": "u-7", "x-session": "s-42"}
        response = await client.post("/triage", json=CASES[0][0].model_dump(), headers=headers)
    assert response.status_code == 200
    assert response.json()["priority"] == "p1"


@pytest.mark.parametrize(("ticket", "priority"), CASES)
def test_eval_gate(templiqx_replay_runtime, ticket, priority):
    assert TRIAGE.run(templiqx_replay_runtime(), ticket).priority == priority
