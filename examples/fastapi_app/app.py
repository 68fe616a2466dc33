"""A FastAPI service that greets through a prompt contract, natively async and traced.

    TEMPLIQX_MODEL_BASE_URL=... TEMPLIQX_MODEL_API_KEY=... TEMPLIQX_MODEL=gpt-4o-mini \
    LANGFUSE_PUBLIC_KEY=... LANGFUSE_SECRET_KEY=... LANGFUSE_PROJECT_ID=... \
    uvicorn examples.fastapi_app.app:app

One runtime per process, opened and closed by the app's lifespan; every request awaits
``aexecute_traced`` on the event loop (no thread per call) and answers with the output
and the URL of its Langfuse trace.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel

from templiqx_core import Contract, ExecutionRequest, RenderRequest, compile_contract
from templiqx_langfuse import LangfuseTracedRuntime

CONTRACT = Contract.model_validate(
    yaml.safe_load((Path(__file__).parents[1] / "greeting.yaml").read_text(encoding="utf-8"))
)


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    async with LangfuseTracedRuntime.from_env() as runtime:  # flushes traces on shutdown
        app.state.runtime = runtime
        yield


app = FastAPI(lifespan=lifespan)


class Greet(BaseModel):
    name: str
    organization: str


@app.post("/greet")
async def greet(body: Greet, request: Request) -> dict[str, Any]:
    compiled = compile_contract(
        CONTRACT,
        RenderRequest(inputs={"name": body.name}, context={"organization": body.organization}),
        ["structured_output"],
    )
    if compiled.interaction is None:
        raise HTTPException(422, [d.message for d in compiled.diagnostics])
    runtime: LangfuseTracedRuntime = request.app.state.runtime
    traced = await runtime.aexecute_traced(ExecutionRequest(interaction=compiled.interaction))
    return {"output": traced.receipt.output, "trace_url": traced.trace_url}
