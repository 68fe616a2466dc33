"""One recorded endpoint test and the eval gate, replayed from cassettes (pytest-recording)."""

import httpx
import pytest
from langfuse.openai import AsyncOpenAI

from .service import Ticket, app, classify

CASES = [
    (Ticket(subject="Site down", body="Every page answers 500.", tier="enterprise"), "p1"),
    (Ticket(subject="Invoice copy", body="Please resend March.", tier="free"), "p3"),
]


@pytest.fixture(scope="module")
def vcr_config():
    return {"filter_headers": ["authorization"], "ignore_hosts": ["app"]}


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.fixture
def client(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-replay")  # replaying: never sent
    return AsyncOpenAI()


@pytest.mark.vcr
@pytest.mark.anyio
async def test_triage_endpoint(client):
    app.state.client = client
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
        headers = {"x-user": "u-7", "x-session": "s-42"}
        response = await http.post("/triage", json=CASES[0][0].model_dump(), headers=headers)
    assert response.status_code == 200
    assert response.json()["priority"] == "p1"


@pytest.mark.vcr
@pytest.mark.anyio
@pytest.mark.parametrize(("ticket", "priority"), CASES)
async def test_eval_gate(client, ticket, priority):
    assert (await classify(client, ticket)).priority == priority
