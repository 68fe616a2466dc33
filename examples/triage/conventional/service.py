"""Support-ticket triage the conventional way: langfuse.openai and a pydantic output model."""

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal

import openai
from fastapi import FastAPI, Header, Request
from fastapi.responses import JSONResponse
from langfuse import get_client, propagate_attributes
from langfuse.openai import AsyncOpenAI
from pydantic import BaseModel, Field, ValidationError


class Ticket(BaseModel):
    subject: str = Field(min_length=1)
    body: str
    tier: Literal["free", "pro", "enterprise"]


class Triage(BaseModel):
    priority: Literal["p1", "p2", "p3"]
    team: Literal["billing", "technical", "account"]
    summary: str


SYSTEM = "Triage the support ticket: priority, owning team, one-line summary."


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with AsyncOpenAI(timeout=30, max_retries=2) as app.state.client:
        yield
    get_client().flush()


app = FastAPI(lifespan=lifespan)
STATUS = {openai.APITimeoutError: 504, openai.RateLimitError: 503}


@app.exception_handler(openai.OpenAIError)
@app.exception_handler(ValidationError)  # an answer the model refuses
async def model_call_failed(request: Request, error: Exception) -> JSONResponse:
    return JSONResponse({"error": type(error).__name__}, status_code=STATUS.get(type(error), 502))


async def classify(client: AsyncOpenAI, ticket: Ticket) -> Triage:
    completion = await client.chat.completions.parse(
        model=os.environ.get("OPENAI_MODEL", "gpt-4o-mini"),
        temperature=0,
        response_format=Triage,
        messages=[
            {"role": "system", "content": SYSTEM},
            {
                "role": "user",
                "content": f"Tier: {ticket.tier}\nSubject: {ticket.subject.strip()}\n\n"
                f"{ticket.body}",
            },
        ],
    )
    answer = completion.choices[0].message.parsed
    if answer is None:  # a refusal
        raise openai.OpenAIError("the model refused")
    return answer


@app.post("/triage")
async def triage(
    ticket: Ticket, request: Request, x_user: str = Header(), x_session: str = Header()
) -> Triage:
    with propagate_attributes(user_id=x_user, session_id=x_session, trace_name="ticket-triage"):
        return await classify(request.app.state.client, ticket)
