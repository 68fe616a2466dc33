"""Support-ticket triage with a typed contract: the output shape is the model, once."""

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from templiqx_core import PortError, TypedContract, codes
from templiqx_langfuse import LangfuseTracedRuntime, trace_attributes


class Ticket(BaseModel):
    subject: str = Field(min_length=1)
    body: str
    tier: Literal["free", "pro", "enterprise"]


class Triage(BaseModel):
    priority: Literal["p1", "p2", "p3"]
    team: Literal["billing", "technical", "account"]
    summary: str


TRIAGE = TypedContract.define(
    id="ticket-triage",
    version="1",
    output=Triage,
    inputs=Ticket,
    messages=[
        ("system", "Triage the support ticket: priority, owning team, one-line summary."),
        (
            "user",
            "Tier: {{ inputs.tier }}\nSubject: {{ inputs.subject | trim }}\n\n{{ inputs.body }}",
        ),
    ],
    runtime_policy={"temperature": 0},
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with LangfuseTracedRuntime.from_env() as app.state.runtime:  # flushes on shutdown
        yield


app = FastAPI(lifespan=lifespan)
STATUS = {codes.RUNTIME_TIMEOUT: 504, codes.RUNTIME_RATE_LIMITED: 503}


@app.exception_handler(PortError)
async def model_call_failed(request: Request, error: PortError) -> JSONResponse:
    return JSONResponse({"code": error.code}, status_code=STATUS.get(error.code, 502))


@app.post("/triage")
async def triage(
    ticket: Ticket, request: Request, x_user: str = Header(), x_session: str = Header()
) -> Triage:
    with trace_attributes(user_id=x_user, session_id=x_session):
        return await TRIAGE.arun(request.app.state.runtime, ticket)
