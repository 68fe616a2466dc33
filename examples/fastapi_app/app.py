"""A FastAPI service that greets through a prompt contract, natively async and traced.

    TEMPLIQX_MODEL_BASE_URL=... TEMPLIQX_MODEL_API_KEY=... TEMPLIQX_MODEL=gpt-4o-mini \
    LANGFUSE_PUBLIC_KEY=... LANGFUSE_SECRET_KEY=... LANGFUSE_PROJECT_ID=... \
    uvicorn examples.fastapi_app.app:app

One runtime per process, opened and closed by the app's lifespan; every request awaits
``aexecute_traced`` on the event loop (no thread per call) and answers with the output
and the URL of its Langfuse trace. A model call that fails is an HTTP answer named by its
stable code (a timeout is 504, a rate limit 503 with ``Retry-After``...), never a 500
with a traceback: the runtime raises only typed ``PortError``s.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import yaml
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel

from templiqx_core import (
    Contract,
    ExecutionRequest,
    PortError,
    RenderRequest,
    RuntimeFailureError,
    codes,
    compile_contract,
)
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

#: How the model's failures reach this service's callers (anything else: 500).
STATUS_BY_CODE = {
    codes.RUNTIME_TIMEOUT: 504,
    codes.RUNTIME_RATE_LIMITED: 503,
    codes.RUNTIME_UNAVAILABLE: 502,
    codes.RUNTIME_INVALID_RESPONSE: 502,
    codes.DATA_INVALID: 422,
}


@app.exception_handler(PortError)
async def model_call_failed(request: Request, error: PortError) -> JSONResponse:
    headers = {}
    if isinstance(error, RuntimeFailureError) and error.failure.retry_after_ms is not None:
        headers["retry-after"] = str(-(-error.failure.retry_after_ms // 1000))
    # str(error) says what failed (a runtime failure's names its code too), never the
    # provider's text or a key.
    body = {"code": error.code, "detail": str(error)}
    return JSONResponse(body, status_code=STATUS_BY_CODE.get(error.code, 500), headers=headers)


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
